//! The listeners: each address bound, its connections accepted up to the limit they share,
//! each connection held to what it may buffer before a request of it is read, and the open
//! ones let finish at shutdown.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::sync::Semaphore;

/// What a connection may hold before a request of it is read (see
/// [`crate::collect::CONNECTION_BYTES`]): an HTTP/1.1 request head, and its read buffer.
const HEAD_BYTES: usize = 64 << 10;
/// How long an HTTP/1.1 request head may take to arrive (also how long a kept-alive
/// connection waits for its next request).
const HEAD_TIMEOUT: Duration = Duration::from_secs(30);
/// HTTP/2 streams a connection may have open at once (an OTLP exporter sends one request at
/// a time), the size of their headers, and the flow-control windows that bound the bodies
/// received before they are read.
const STREAMS: u32 = 4;
const HEADER_LIST_BYTES: u32 = 16 << 10;
const WINDOW_BYTES: u32 = 64 << 10;
const SEND_BUFFER_BYTES: usize = 16 << 10;

/// Connections served at once, on every address together.
pub(crate) fn connection_limit(connections: usize) -> Arc<Semaphore> {
    Arc::new(Semaphore::new(connections.clamp(1, Semaphore::MAX_PERMITS)))
}

/// Binds `addr` (port 0: a free port) and serves `router` until `stop` resolves, each
/// connection holding one of `connections` (the others wait to be accepted).
pub(crate) async fn serve(
    addr: SocketAddr,
    router: Router,
    connections: Arc<Semaphore>,
    tls: Option<Arc<rustls::ServerConfig>>,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    let tls = tls.map(tokio_rustls::TlsAcceptor::from);
    let task = tokio::spawn(accept(listener, router, connections, tls, stop));
    Ok((local, task))
}

/// The server's settings: what one connection may hold, see the constants above.
fn connection_builder() -> Builder<TokioExecutor> {
    let mut builder = Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(HEAD_TIMEOUT)
        .max_buf_size(HEAD_BYTES);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(STREAMS)
        .max_header_list_size(HEADER_LIST_BYTES)
        .initial_stream_window_size(WINDOW_BYTES)
        .initial_connection_window_size(WINDOW_BYTES)
        .max_send_buf_size(SEND_BUFFER_BYTES);
    builder
}

/// Accepts connections while fewer than the limit are open, until `stop`; then lets the
/// open ones finish. With `tls`, each connection's handshake runs on its own task, bounded
/// by the time a request's head may take, so a slow client holds only its connection; at
/// shutdown the handshakes still in flight are dropped at once.
async fn accept(
    listener: tokio::net::TcpListener,
    router: Router,
    connections: Arc<Semaphore>,
    tls: Option<tokio_rustls::TlsAcceptor>,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) {
    let builder = connection_builder();
    let graceful = GracefulShutdown::new();
    // Tells the handshakes in flight to give up at shutdown: each holds a watcher, which
    // the graceful shutdown would otherwise wait on for up to the handshake's bound.
    let (closing, closed) = tokio::sync::watch::channel(false);
    let mut stop = std::pin::pin!(stop);
    loop {
        let connection = tokio::select! {
            permit = Arc::clone(&connections).acquire_owned() => permit,
            () = &mut stop => break,
        };
        let Ok(connection) = connection else { break };
        let stream = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut stop => break,
        };
        let stream = match stream {
            Ok((stream, _)) => stream,
            Err(_) => {
                // Out of file descriptors, or a connection reset before it was accepted.
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let service = TowerToHyperService::new(router.clone());
        if let Some(acceptor) = &tls {
            let acceptor = acceptor.clone();
            let builder = builder.clone();
            let watcher = graceful.watcher();
            let mut closed = closed.clone();
            tokio::spawn(async move {
                let handshake = tokio::time::timeout(HEAD_TIMEOUT, acceptor.accept(stream));
                let handshake = tokio::select! {
                    done = handshake => Some(done),
                    _ = closed.wait_for(|closed| *closed) => None,
                };
                if let Some(Ok(Ok(stream))) = handshake {
                    let served = builder
                        .serve_connection_with_upgrades(TokioIo::new(stream), service)
                        .into_owned();
                    let _ = watcher.watch(served).await;
                }
                drop(connection);
            });
            continue;
        }
        let served = builder
            .serve_connection_with_upgrades(TokioIo::new(stream), service)
            .into_owned();
        let served = graceful.watch(served);
        tokio::spawn(async move {
            let _ = served.await;
            drop(connection);
        });
    }
    drop(listener);
    let _ = closing.send(true);
    graceful.shutdown().await;
}

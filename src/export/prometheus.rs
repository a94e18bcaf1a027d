//! A Prometheus scrape endpoint (`GET /metrics`) served by hyper on a small tokio runtime of
//! its own thread, from a meter provider of its own, so scrapes and OTLP exports keep separate
//! peak windows.
//!
//! Every connection is a task of its own with limits on its size and time, so a client that
//! sends half a request, sends too much, or reads its answer slowly delays nobody else.

use std::convert::Infallible;
use std::net::{SocketAddr, TcpListener};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use http_body_util::Full;
use hyper::body::{Body as _, Bytes, Incoming};
use hyper::header::{HeaderValue, ALLOW, CONTENT_TYPE};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use opentelemetry_sdk::metrics::SdkMeterProvider;
use opentelemetry_sdk::Resource;
use tokio::sync::{oneshot, Semaphore};

use super::queue::Backlog;
use crate::error::InitError;

/// A client has this long to send its request line and headers.
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(2);
/// A connection is cut after this long, whatever it is doing (a client that reads slowly).
const CONNECTION_TIMEOUT: Duration = Duration::from_secs(10);
/// Request line and headers larger than this get `431`; hyper's smallest allowed buffer.
const MAX_HEAD_BYTES: usize = 8 * 1024;
/// A scrape is a `GET`: a request announcing a larger body gets `413` unread.
const MAX_BODY_BYTES: u64 = 1024;
/// Connections served at once; further ones are closed as soon as they are accepted.
const MAX_CONNECTIONS: usize = 64;

const TEXT_FORMAT: &str = "text/plain; version=0.0.4; charset=utf-8";
/// Longest a scrape waits for ended spans to reach the duration histograms.
const SPANS_SETTLE: Duration = Duration::from_millis(200);

/// The running endpoint. Dropping it stops the server thread.
#[derive(Debug)]
pub(crate) struct PrometheusEndpoint {
    addr: SocketAddr,
    pub(crate) provider: SdkMeterProvider,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
    /// The span export's backlog, set once the span pipeline exists.
    spans: Arc<OnceLock<Backlog>>,
}

impl PrometheusEndpoint {
    /// From now on a scrape first lets every ended span through the span taps (which feed
    /// the duration histograms), so it counts every step that ended before it.
    pub(crate) fn settle_spans_before_scrapes(&self, backlog: Backlog) {
        let _ = self.spans.set(backlog);
    }

    /// Binds `addr` and starts serving.
    pub(crate) fn start(addr: SocketAddr, resource: Resource) -> Result<Self, InitError> {
        let failed = |reason: String| InitError::Prometheus { addr, reason };
        let registry = prometheus::Registry::new();
        let exporter = opentelemetry_prometheus::exporter()
            .with_registry(registry.clone())
            .build()
            .map_err(|e| failed(e.to_string()))?;
        let listener = TcpListener::bind(addr).map_err(|e| {
            failed(format!(
                "{e} (choose another port with GPUSPAN_PROMETHEUS_ADDR)"
            ))
        })?;
        let bound = listener.local_addr().map_err(|e| failed(e.to_string()))?;
        listener
            .set_nonblocking(true)
            .map_err(|e| failed(e.to_string()))?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build()
            .map_err(|e| failed(format!("cannot start its tokio runtime: {e}")))?;
        let provider = SdkMeterProvider::builder()
            .with_resource(resource)
            .with_reader(exporter)
            .build();
        let (stop, stopped) = oneshot::channel();
        let spans = Arc::new(OnceLock::new());
        let scrape_spans = Arc::clone(&spans);
        let thread = std::thread::Builder::new()
            .name("gpuspan-prometheus".into())
            .spawn(move || {
                crate::background::silence_tracing();
                runtime.block_on(async move {
                    tokio::select! {
                        () = serve(listener, Arc::new(registry), scrape_spans) => {}
                        _ = stopped => {}
                    }
                });
                // Dropping the runtime here cancels every open connection.
            })
            .map_err(|source| InitError::Thread {
                what: "prometheus",
                source,
            })?;
        Ok(Self {
            addr: bound,
            provider,
            stop: Some(stop),
            thread: Some(thread),
            spans,
        })
    }

    /// The address actually bound (a port of 0 picks a free one).
    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub(crate) fn stop(&mut self) {
        if let Some(stop) = self.stop.take() {
            // The server may have ended on its own; then nobody listens.
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            // Connections are cancelled, not waited for, so this join is short.
            let _ = thread.join();
        }
        let _ = self.provider.shutdown();
    }
}

impl Drop for PrometheusEndpoint {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Accepts connections until the listener fails, each served by a task of its own.
async fn serve(
    listener: TcpListener,
    registry: Arc<prometheus::Registry>,
    spans: Arc<OnceLock<Backlog>>,
) {
    let Ok(listener) = tokio::net::TcpListener::from_std(listener) else {
        return;
    };
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            // Out of file descriptors and the like: pause rather than spin.
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(slot) = Arc::clone(&slots).try_acquire_owned() else {
            continue; // over the limit: the stream drops, closing the connection
        };
        let registry = Arc::clone(&registry);
        let spans = Arc::clone(&spans);
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |request| {
                let registry = Arc::clone(&registry);
                let spans = Arc::clone(&spans);
                async move {
                    if let Some(backlog) = spans.get() {
                        backlog.settled(Instant::now() + SPANS_SETTLE).await;
                    }
                    Ok::<_, Infallible>(answer(&request, &registry))
                }
            });
            let connection = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_READ_TIMEOUT)
                .max_buf_size(MAX_HEAD_BYTES)
                .keep_alive(false)
                .serve_connection(TokioIo::new(stream), service);
            let _ = tokio::time::timeout(CONNECTION_TIMEOUT, connection).await;
            drop(slot);
        });
    }
}

/// The answer to one request: the metrics for `GET /metrics` (or `/`), an error otherwise.
fn answer(request: &Request<Incoming>, registry: &prometheus::Registry) -> Response<Full<Bytes>> {
    let path = request.uri().path();
    if path != "/metrics" && path != "/" {
        return text(StatusCode::NOT_FOUND, "gpuspan serves GET /metrics\n");
    }
    if request.method() != Method::GET {
        let mut response = text(
            StatusCode::METHOD_NOT_ALLOWED,
            "gpuspan serves GET /metrics\n",
        );
        response
            .headers_mut()
            .insert(ALLOW, HeaderValue::from_static("GET"));
        return response;
    }
    if request
        .body()
        .size_hint()
        .upper()
        .is_none_or(|size| size > MAX_BODY_BYTES)
    {
        return text(
            StatusCode::PAYLOAD_TOO_LARGE,
            "a scrape is a GET without a body\n",
        );
    }
    let mut body = Vec::new();
    let encoder = prometheus::TextEncoder::new();
    match prometheus::Encoder::encode(&encoder, &registry.gather(), &mut body) {
        Ok(()) => {
            let mut response = Response::new(Full::new(Bytes::from(body)));
            response
                .headers_mut()
                .insert(CONTENT_TYPE, HeaderValue::from_static(TEXT_FORMAT));
            response
        }
        Err(e) => text(
            StatusCode::INTERNAL_SERVER_ERROR,
            &format!("encoding the metrics failed: {e}\n"),
        ),
    }
}

fn text(status: StatusCode, body: &str) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body.to_owned())));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    response
}

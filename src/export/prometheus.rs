//! A Prometheus scrape endpoint (`GET /metrics`) served by a small thread of its own, from
//! a meter provider of its own, so scrapes and OTLP exports keep separate peak windows.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use opentelemetry_sdk::metrics::SdkMeterProvider;
use opentelemetry_sdk::Resource;

use crate::error::InitError;

/// The running endpoint. Dropping it stops the thread.
#[derive(Debug)]
pub(crate) struct PrometheusEndpoint {
    addr: SocketAddr,
    pub(crate) provider: SdkMeterProvider,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl PrometheusEndpoint {
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
        let provider = SdkMeterProvider::builder()
            .with_resource(resource)
            .with_reader(exporter)
            .build();
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let stop = Arc::clone(&stop);
            std::thread::Builder::new()
                .name("gpuspan-prometheus".into())
                .spawn(move || serve(&listener, &registry, &stop))
                .map_err(|source| InitError::Thread {
                    what: "prometheus",
                    source,
                })?
        };
        Ok(Self {
            addr: bound,
            provider,
            stop,
            thread: Some(thread),
        })
    }

    /// The address actually bound (a port of 0 picks a free one).
    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub(crate) fn stop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            // Wake the blocking accept.
            let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
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

fn serve(listener: &TcpListener, registry: &prometheus::Registry, stop: &AtomicBool) {
    for stream in listener.incoming() {
        if stop.load(Ordering::Relaxed) {
            return;
        }
        if let Ok(stream) = stream {
            let _ = answer(stream, registry);
        }
    }
}

/// Answers one HTTP/1.1 request and closes the connection.
fn answer(mut stream: TcpStream, registry: &prometheus::Registry) -> std::io::Result<()> {
    stream.set_read_timeout(Some(Duration::from_secs(2)))?;
    let mut request = Vec::new();
    let mut buf = [0u8; 1024];
    while !request.windows(4).any(|w| w == b"\r\n\r\n") && request.len() < 16 * 1024 {
        let n = stream.read(&mut buf)?;
        if n == 0 {
            break;
        }
        request.extend_from_slice(&buf[..n]);
    }
    let line = String::from_utf8_lossy(&request);
    let mut parts = line.split_whitespace();
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = path.split('?').next().unwrap_or("");
    let (status, content_type, body) = if method == "GET" && (path == "/metrics" || path == "/") {
        let mut body = Vec::new();
        let encoder = prometheus::TextEncoder::new();
        match prometheus::Encoder::encode(&encoder, &registry.gather(), &mut body) {
            Ok(()) => ("200 OK", "text/plain; version=0.0.4; charset=utf-8", body),
            Err(e) => (
                "500 Internal Server Error",
                "text/plain",
                e.to_string().into_bytes(),
            ),
        }
    } else {
        (
            "404 Not Found",
            "text/plain",
            b"gpuspan serves GET /metrics\n".to_vec(),
        )
    };
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes())?;
    stream.write_all(&body)?;
    stream.flush()
}

//! A real OTLP receiver for integration tests.
//!
//! [`Receiver::start_grpc`] serves the OTLP/gRPC `TraceService` and
//! `MetricsService` with tonic; [`Receiver::start_http`] serves OTLP/HTTP
//! (`POST /v1/traces`, `POST /v1/metrics`, protobuf or JSON bodies) with axum.
//! Either one listens on `127.0.0.1` on a port picked by the OS, on its own
//! thread with its own tokio runtime, so it works the same from a plain
//! `#[test]` and from `#[tokio::test]`, and never shares a runtime with the
//! exporters under test.
//!
//! Every export request is kept exactly as decoded, together with its request
//! headers. The query methods flatten those requests into owned values
//! ([`ReceivedSpan`], [`ReceivedPoint`], [`RequestHeaders`]) that are easy to
//! assert on; the raw requests are available too.
//!
//! Dropping the receiver stops the server and joins its thread.

mod flatten;
mod grpc;
mod http;
mod received;
mod recording;

use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
pub use opentelemetry_proto::tonic::metrics::v1::AggregationTemporality;
pub use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
pub use opentelemetry_proto::tonic::trace::v1::status::StatusCode;

use flatten::{flatten_points, flatten_spans};
pub use received::{
    AttrValue, Attributes, MetricKind, PointValue, ReceivedEvent, ReceivedPoint, ReceivedSpan,
    RequestHeaders,
};
use recording::{Recorded, Shared};

/// The OTLP transport a [`Receiver`] speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    Grpc,
    Http,
}

/// Which OTLP signal a request carried.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Signal {
    Traces,
    Metrics,
}

/// A running OTLP receiver. See the module documentation.
pub struct Receiver {
    protocol: Protocol,
    addr: SocketAddr,
    /// Served over TLS: `https://` URLs.
    tls: bool,
    shared: Arc<Shared>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Receiver {
    /// Starts an OTLP/gRPC receiver (tonic) on `127.0.0.1`, port chosen by the OS.
    pub fn start_grpc() -> Receiver {
        Receiver::start(Protocol::Grpc)
    }

    /// Starts an OTLP/HTTP receiver (axum) on `127.0.0.1`, port chosen by the OS.
    pub fn start_http() -> Receiver {
        Receiver::start(Protocol::Http)
    }

    /// Starts a receiver speaking `protocol`.
    ///
    /// The socket is bound before this returns, so an exporter may connect
    /// right away: connections wait in the listen backlog until the server
    /// thread accepts them.
    pub fn start(protocol: Protocol) -> Receiver {
        Receiver::start_with(protocol, None)
    }

    /// Starts a receiver speaking `protocol` over TLS (see [`crate::tls`]); its URLs are
    /// `https://127.0.0.1:PORT`.
    pub fn start_tls(protocol: Protocol, tls: crate::tls::ServerTls) -> Receiver {
        Receiver::start_with(protocol, Some(tls))
    }

    fn start_with(protocol: Protocol, tls: Option<crate::tls::ServerTls>) -> Receiver {
        let https = tls.is_some();
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the OTLP test receiver");
        listener
            .set_nonblocking(true)
            .expect("make the receiver's listener non-blocking");
        let addr = listener.local_addr().expect("receiver's local address");

        let shared = Arc::new(Shared::default());
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let server_shared = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name(format!("otlp-receiver-{addr}"))
            .spawn(move || {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("build the receiver's tokio runtime");
                runtime.block_on(async move {
                    let listener = tokio::net::TcpListener::from_std(listener)
                        .expect("register the receiver's listener with tokio");
                    tokio::select! {
                        () = serve(protocol, listener, server_shared, tls) => {}
                        _ = stop_rx => {}
                    }
                });
                // Dropping the runtime here cancels every connection task.
            })
            .expect("spawn the receiver thread");

        Receiver {
            protocol,
            addr,
            tls: https,
            shared,
            stop: Some(stop_tx),
            thread: Some(thread),
        }
    }

    pub fn protocol(&self) -> Protocol {
        self.protocol
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// The base URL, `http://127.0.0.1:PORT`.
    ///
    /// For gRPC this is what an exporter's endpoint should be. For HTTP it is
    /// what `OTEL_EXPORTER_OTLP_ENDPOINT` should be (opentelemetry-otlp appends
    /// `/v1/traces` or `/v1/metrics` to that variable); an endpoint set on an
    /// HTTP exporter builder or in a per-signal variable is used as is, so use
    /// [`Receiver::traces_url`] / [`Receiver::metrics_url`] there.
    pub fn endpoint(&self) -> String {
        let scheme = if self.tls { "https" } else { "http" };
        format!("{scheme}://{}", self.addr)
    }

    /// `http://127.0.0.1:PORT/v1/traces`.
    pub fn traces_url(&self) -> String {
        format!("{}/v1/traces", self.endpoint())
    }

    /// `http://127.0.0.1:PORT/v1/metrics`.
    pub fn metrics_url(&self) -> String {
        format!("{}/v1/metrics", self.endpoint())
    }

    /// Stops serving: the port is closed and open connections are cut.
    /// What was received so far stays queryable. Idempotent; `Drop` calls it.
    pub fn stop(&mut self) {
        if let Some(stop) = self.stop.take() {
            // The server may have ended on its own; then nobody listens.
            let _ = stop.send(());
        }
        if let Some(thread) = self.thread.take() {
            if let Err(panic) = thread.join() {
                if !std::thread::panicking() {
                    std::panic::resume_unwind(panic);
                }
            }
        }
    }

    /// Refuses every request from now on (`true`), as a collector that is down, or
    /// accepts them again (`false`).
    pub fn set_failing(&self, failing: bool) {
        self.shared
            .failing
            .store(failing, std::sync::atomic::Ordering::SeqCst);
    }

    /// Holds every request this long before answering.
    pub fn set_stall(&self, stall: Duration) {
        self.shared.stall_ms.store(
            u64::try_from(stall.as_millis()).unwrap_or(u64::MAX),
            std::sync::atomic::Ordering::SeqCst,
        );
    }

    /// Requests that arrived so far, of both signals, refused ones included.
    pub fn attempts(&self) -> u64 {
        self.attempts_of(Signal::Traces) + self.attempts_of(Signal::Metrics)
    }

    /// Requests of one signal that arrived so far, refused ones included: a guard about
    /// span exports must not count the metric exports that a flush or a shutdown sends.
    pub fn attempts_of(&self, signal: Signal) -> u64 {
        self.shared.attempts[signal as usize].load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Forgets everything received so far (requests and headers).
    pub fn clear(&self) {
        *self.shared.lock() = Recorded::default();
    }

    // ----- counts and raw requests -------------------------------------------

    /// How many trace export requests arrived.
    pub fn trace_requests(&self) -> usize {
        self.shared.lock().traces.len()
    }

    /// How many metric export requests arrived.
    pub fn metric_requests(&self) -> usize {
        self.shared.lock().metrics.len()
    }

    /// Every trace export request, as decoded, in arrival order.
    pub fn raw_trace_requests(&self) -> Vec<ExportTraceServiceRequest> {
        self.shared.lock().traces.clone()
    }

    /// Every metric export request, as decoded, in arrival order.
    pub fn raw_metric_requests(&self) -> Vec<ExportMetricsServiceRequest> {
        self.shared.lock().metrics.clone()
    }

    /// The headers (gRPC metadata for gRPC) of every request, in arrival order.
    pub fn headers(&self) -> Vec<RequestHeaders> {
        self.shared.lock().headers.clone()
    }

    // ----- spans -------------------------------------------------------------

    /// How many spans the trace requests held in all (duplicates counted).
    pub fn span_count(&self) -> u64 {
        self.raw_trace_requests()
            .iter()
            .flat_map(|r| &r.resource_spans)
            .flat_map(|r| &r.scope_spans)
            .map(|s| s.spans.len() as u64)
            .sum()
    }

    /// Every span received, in arrival order.
    pub fn spans(&self) -> Vec<ReceivedSpan> {
        flatten_spans(&self.shared.lock().traces)
    }

    /// The spans called `name`, in arrival order.
    pub fn spans_named(&self, name: &str) -> Vec<ReceivedSpan> {
        let mut spans = self.spans();
        spans.retain(|span| span.name == name);
        spans
    }

    /// Waits until `done` holds for the spans received so far, or until
    /// `timeout` passes, and returns the spans received by then either way:
    /// assert on the result to get a readable failure.
    pub fn wait_for_spans(
        &self,
        done: impl Fn(&[ReceivedSpan]) -> bool,
        timeout: Duration,
    ) -> Vec<ReceivedSpan> {
        let recorded = self
            .shared
            .wait_until(timeout, |recorded| done(&flatten_spans(&recorded.traces)));
        flatten_spans(&recorded.traces)
    }

    // ----- metric points -----------------------------------------------------

    /// Every metric data point received, in arrival order.
    pub fn metric_points(&self) -> Vec<ReceivedPoint> {
        flatten_points(&self.shared.lock().metrics)
    }

    /// The data points of the metric called `name`, in arrival order.
    pub fn points_named(&self, name: &str) -> Vec<ReceivedPoint> {
        let mut points = self.metric_points();
        points.retain(|point| point.name == name);
        points
    }

    /// Waits until at least one point of metric `name` has arrived, or until
    /// `timeout` passes, and returns that metric's points either way.
    pub fn wait_for_points(&self, name: &str, timeout: Duration) -> Vec<ReceivedPoint> {
        self.wait_for_points_where(|points| points.iter().any(|p| p.name == name), timeout)
            .into_iter()
            .filter(|point| point.name == name)
            .collect()
    }

    /// Waits until `done` holds for all the points received so far, or until
    /// `timeout` passes, and returns all points received by then either way.
    fn wait_for_points_where(
        &self,
        done: impl Fn(&[ReceivedPoint]) -> bool,
        timeout: Duration,
    ) -> Vec<ReceivedPoint> {
        let recorded = self
            .shared
            .wait_until(timeout, |recorded| done(&flatten_points(&recorded.metrics)));
        flatten_points(&recorded.metrics)
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.stop();
    }
}

impl std::fmt::Debug for Receiver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Receiver")
            .field("protocol", &self.protocol)
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

/// A URL on `127.0.0.1` where nothing listens, for "collector is down" tests:
/// binds port 0, reads the port the OS chose, and closes the listener.
pub fn unused_endpoint() -> String {
    format!("http://127.0.0.1:{}", unused_port())
}

/// A port on `127.0.0.1` where nothing listens (see [`unused_endpoint`]).
pub fn unused_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a probe socket");
    listener
        .local_addr()
        .expect("probe socket's address")
        .port()
}

async fn serve(
    protocol: Protocol,
    listener: tokio::net::TcpListener,
    shared: Arc<Shared>,
    tls: Option<crate::tls::ServerTls>,
) {
    match protocol {
        Protocol::Grpc => grpc::serve_grpc(listener, shared, tls).await,
        Protocol::Http => http::serve_http(listener, shared, tls).await,
    }
}

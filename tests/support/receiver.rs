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

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::{SocketAddr, TcpListener};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{header, HeaderMap, StatusCode as HttpStatus};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_server::{
    MetricsService, MetricsServiceServer,
};
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{any_value, KeyValue};
pub use opentelemetry_proto::tonic::metrics::v1::AggregationTemporality;
use opentelemetry_proto::tonic::metrics::v1::{metric, number_data_point};
pub use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
pub use opentelemetry_proto::tonic::trace::v1::status::StatusCode;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;

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

// ===== what the query methods return =========================================

/// An attribute value, reduced to the types tests assert on.
#[derive(Clone, Debug, PartialEq)]
pub enum AttrValue {
    Int(i64),
    Double(f64),
    Str(String),
    Bool(bool),
    /// An array of strings.
    Strs(Vec<String>),
    /// Other arrays, key-value lists, bytes, or no value at all.
    Other,
}

impl AttrValue {
    pub fn as_int(&self) -> Option<i64> {
        match self {
            AttrValue::Int(v) => Some(*v),
            _ => None,
        }
    }

    pub fn as_double(&self) -> Option<f64> {
        match self {
            AttrValue::Double(v) => Some(*v),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            AttrValue::Str(v) => Some(v),
            _ => None,
        }
    }

    pub fn as_strs(&self) -> Option<Vec<&str>> {
        match self {
            AttrValue::Strs(v) => Some(v.iter().map(String::as_str).collect()),
            _ => None,
        }
    }

    pub fn as_bool(&self) -> Option<bool> {
        match self {
            AttrValue::Bool(v) => Some(*v),
            _ => None,
        }
    }
}

/// Attributes by key. A key sent twice keeps its last value.
pub type Attributes = BTreeMap<String, AttrValue>;

/// Gives `$type` (which has an `attributes: Attributes` field) the typed
/// lookups `int_attr`, `double_attr`, `str_attr` and `bool_attr`. Each returns
/// `None` when the key is absent or holds a value of another type.
macro_rules! typed_attribute_lookups {
    ($type:ty) => {
        impl $type {
            pub fn int_attr(&self, key: &str) -> Option<i64> {
                self.attributes.get(key).and_then(AttrValue::as_int)
            }

            pub fn double_attr(&self, key: &str) -> Option<f64> {
                self.attributes.get(key).and_then(AttrValue::as_double)
            }

            pub fn str_attr(&self, key: &str) -> Option<&str> {
                self.attributes.get(key).and_then(AttrValue::as_str)
            }

            pub fn bool_attr(&self, key: &str) -> Option<bool> {
                self.attributes.get(key).and_then(AttrValue::as_bool)
            }

            pub fn strs_attr(&self, key: &str) -> Option<Vec<&str>> {
                self.attributes.get(key).and_then(AttrValue::as_strs)
            }
        }
    };
}

typed_attribute_lookups!(ReceivedSpan);
typed_attribute_lookups!(ReceivedEvent);
typed_attribute_lookups!(ReceivedPoint);

/// One span, with the resource and scope it was sent under.
#[derive(Clone, Debug, PartialEq)]
pub struct ReceivedSpan {
    pub name: String,
    /// Lower-case hex, 32 digits.
    pub trace_id: String,
    /// Lower-case hex, 16 digits.
    pub span_id: String,
    /// Lower-case hex, or empty for a root span.
    pub parent_span_id: String,
    pub start_time_unix_nano: u64,
    pub end_time_unix_nano: u64,
    pub kind: SpanKind,
    pub status_code: StatusCode,
    pub status_message: String,
    pub attributes: Attributes,
    pub events: Vec<ReceivedEvent>,
    pub resource_attributes: Attributes,
    pub scope_name: String,
}

impl ReceivedSpan {
    pub fn is_root(&self) -> bool {
        self.parent_span_id.is_empty()
    }

    /// Whether `self` is a direct child of `parent` (same trace, parent link).
    pub fn is_child_of(&self, parent: &ReceivedSpan) -> bool {
        self.trace_id == parent.trace_id && self.parent_span_id == parent.span_id
    }

    /// The `Str` value of resource attribute `key` (for example `service.name`).
    pub fn resource_str_attr(&self, key: &str) -> Option<&str> {
        self.resource_attributes
            .get(key)
            .and_then(AttrValue::as_str)
    }

    pub fn events_named(&self, name: &str) -> Vec<&ReceivedEvent> {
        self.events.iter().filter(|e| e.name == name).collect()
    }
}

/// One span event.
#[derive(Clone, Debug, PartialEq)]
pub struct ReceivedEvent {
    pub name: String,
    pub time_unix_nano: u64,
    pub attributes: Attributes,
}

/// The kind of metric a point belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MetricKind {
    Gauge,
    Sum {
        monotonic: bool,
    },
    Histogram,
    /// Exponential histograms and summaries; their points carry
    /// [`PointValue::Other`].
    Other,
}

/// The value of one data point.
#[derive(Clone, Debug, PartialEq)]
pub enum PointValue {
    Int(i64),
    Double(f64),
    Histogram {
        count: u64,
        sum: Option<f64>,
        min: Option<f64>,
        max: Option<f64>,
        bucket_counts: Vec<u64>,
        explicit_bounds: Vec<f64>,
    },
    /// A number point without a value, or a point of a [`MetricKind::Other`] metric.
    Other,
}

/// One metric data point, with its metric, resource and scope.
#[derive(Clone, Debug, PartialEq)]
pub struct ReceivedPoint {
    /// The metric's name.
    pub name: String,
    pub description: String,
    pub unit: String,
    pub kind: MetricKind,
    /// `None` for gauges (and [`MetricKind::Other`]).
    pub temporality: Option<AggregationTemporality>,
    pub attributes: Attributes,
    pub value: PointValue,
    pub start_time_unix_nano: u64,
    pub time_unix_nano: u64,
    pub resource_attributes: Attributes,
    pub scope_name: String,
}

impl ReceivedPoint {
    /// The value of an integer gauge or sum point.
    pub fn as_int(&self) -> Option<i64> {
        match self.value {
            PointValue::Int(v) => Some(v),
            _ => None,
        }
    }

    /// The value of a floating-point gauge or sum point.
    pub fn as_double(&self) -> Option<f64> {
        match self.value {
            PointValue::Double(v) => Some(v),
            _ => None,
        }
    }

    /// The count of a histogram point.
    pub fn count(&self) -> Option<u64> {
        match self.value {
            PointValue::Histogram { count, .. } => Some(count),
            _ => None,
        }
    }

    /// The `Str` value of resource attribute `key` (for example `service.name`).
    pub fn resource_str_attr(&self, key: &str) -> Option<&str> {
        self.resource_attributes
            .get(key)
            .and_then(AttrValue::as_str)
    }
}

/// The headers of one request. Names are lower case; for gRPC these are the
/// request metadata (custom metadata such as `x-api-key` included).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestHeaders {
    pub signal: Signal,
    entries: Vec<(String, String)>,
}

impl RequestHeaders {
    fn from_http(signal: Signal, headers: &HeaderMap) -> RequestHeaders {
        let entries = headers
            .iter()
            .map(|(name, value)| {
                let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
                (name.as_str().to_owned(), value)
            })
            .collect();
        RequestHeaders { signal, entries }
    }

    /// The first value of header `name` (case-insensitive).
    pub fn get(&self, name: &str) -> Option<&str> {
        self.get_all(name).into_iter().next()
    }

    /// Every value of header `name` (case-insensitive), in order.
    pub fn get_all(&self, name: &str) -> Vec<&str> {
        self.entries
            .iter()
            .filter(|(key, _)| key.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.as_str())
            .collect()
    }
}

// ===== recording =============================================================

/// Everything received, in arrival order.
#[derive(Default)]
struct Recorded {
    traces: Vec<ExportTraceServiceRequest>,
    metrics: Vec<ExportMetricsServiceRequest>,
    headers: Vec<RequestHeaders>,
}

/// What the server thread and the test share; `changed` is notified after
/// every recorded request so the `wait_for_*` methods need not spin.
#[derive(Default)]
struct Shared {
    recorded: Mutex<Recorded>,
    changed: Condvar,
    /// While set, every request is refused as a collector that is down would be
    /// (HTTP 503, gRPC UNAVAILABLE), and nothing is recorded.
    failing: std::sync::atomic::AtomicBool,
    /// Milliseconds to hold each request before answering.
    stall_ms: std::sync::atomic::AtomicU64,
    /// Requests that arrived, refused ones included, per [`Signal`] (traces first).
    attempts: [std::sync::atomic::AtomicU64; 2],
}

impl Shared {
    /// Counts the attempt, waits the stall, and says whether to refuse it.
    async fn admit(&self, signal: Signal) -> bool {
        use std::sync::atomic::Ordering;
        self.attempts[signal as usize].fetch_add(1, Ordering::SeqCst);
        let stall = self.stall_ms.load(Ordering::SeqCst);
        if stall > 0 {
            tokio::time::sleep(Duration::from_millis(stall)).await;
        }
        !self.failing.load(Ordering::SeqCst)
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Recorded> {
        // A test that panicked while holding the lock leaves valid data.
        self.recorded.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn record_traces(&self, headers: RequestHeaders, request: ExportTraceServiceRequest) {
        let mut recorded = self.lock();
        recorded.headers.push(headers);
        recorded.traces.push(request);
        self.changed.notify_all();
    }

    fn record_metrics(&self, headers: RequestHeaders, request: ExportMetricsServiceRequest) {
        let mut recorded = self.lock();
        recorded.headers.push(headers);
        recorded.metrics.push(request);
        self.changed.notify_all();
    }

    /// Blocks until `done(&recorded)` or until `timeout` passes, and returns
    /// the lock either way.
    fn wait_until(
        &self,
        timeout: Duration,
        done: impl Fn(&Recorded) -> bool,
    ) -> MutexGuard<'_, Recorded> {
        let deadline = Instant::now() + timeout;
        let mut recorded = self.lock();
        while !done(&recorded) {
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            recorded = self
                .changed
                .wait_timeout(recorded, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        recorded
    }
}

// ===== servers ===============================================================

async fn serve(
    protocol: Protocol,
    listener: tokio::net::TcpListener,
    shared: Arc<Shared>,
    tls: Option<crate::tls::ServerTls>,
) {
    match protocol {
        Protocol::Grpc => serve_grpc(listener, shared, tls).await,
        Protocol::Http => serve_http(listener, shared, tls).await,
    }
}

async fn serve_grpc(
    listener: tokio::net::TcpListener,
    shared: Arc<Shared>,
    tls: Option<crate::tls::ServerTls>,
) {
    use tonic::transport::{Certificate, Identity, ServerTlsConfig};
    let service = GrpcService { shared };
    let gzip = tonic::codec::CompressionEncoding::Gzip;
    let mut server = tonic::transport::Server::builder();
    if let Some(tls) = tls {
        let mut config =
            ServerTlsConfig::new().identity(Identity::from_pem(&tls.cert_pem, &tls.key_pem));
        if let Some(ca) = &tls.client_ca_pem {
            config = config.client_ca_root(Certificate::from_pem(ca));
        }
        server = server
            .tls_config(config)
            .expect("the receiver's TLS settings");
    }
    server
        .layer(tower::util::MapRequestLayer::new(expose_reserved_headers))
        .add_service(TraceServiceServer::new(service.clone()).accept_compressed(gzip))
        .add_service(MetricsServiceServer::new(service).accept_compressed(gzip))
        .serve_with_incoming(
            // As collectors do: without it, Nagle's algorithm holds each reply ~40 ms.
            tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true)),
        )
        .await
        .expect("OTLP/gRPC test receiver failed");
}

/// tonic keeps `grpc-encoding` out of the request metadata: copy it as
/// `x-received-grpc-encoding` so tests can read the compression a client used.
fn expose_reserved_headers<B>(mut request: http::Request<B>) -> http::Request<B> {
    if let Some(value) = request.headers().get("grpc-encoding").cloned() {
        request
            .headers_mut()
            .insert("x-received-grpc-encoding", value);
    }
    request
}

#[derive(Clone)]
struct GrpcService {
    shared: Arc<Shared>,
}

#[tonic::async_trait]
impl TraceService for GrpcService {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        if !self.shared.admit(Signal::Traces).await {
            return Err(tonic::Status::unavailable("the test collector is down"));
        }
        let headers = grpc_headers(Signal::Traces, &request);
        self.shared.record_traces(headers, request.into_inner());
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

#[tonic::async_trait]
impl MetricsService for GrpcService {
    async fn export(
        &self,
        request: tonic::Request<ExportMetricsServiceRequest>,
    ) -> Result<tonic::Response<ExportMetricsServiceResponse>, tonic::Status> {
        if !self.shared.admit(Signal::Metrics).await {
            return Err(tonic::Status::unavailable("the test collector is down"));
        }
        let headers = grpc_headers(Signal::Metrics, &request);
        self.shared.record_metrics(headers, request.into_inner());
        Ok(tonic::Response::new(ExportMetricsServiceResponse::default()))
    }
}

fn grpc_headers<T>(signal: Signal, request: &tonic::Request<T>) -> RequestHeaders {
    RequestHeaders::from_http(signal, &request.metadata().clone().into_headers())
}

async fn serve_http(
    listener: tokio::net::TcpListener,
    shared: Arc<Shared>,
    tls: Option<crate::tls::ServerTls>,
) {
    let app = axum::Router::new()
        .route("/v1/traces", post(http_traces))
        .route("/v1/metrics", post(http_metrics))
        .layer(DefaultBodyLimit::disable())
        .with_state(shared);
    match tls {
        None => axum::serve(listener, app)
            .await
            .expect("OTLP/HTTP test receiver failed"),
        Some(tls) => serve_https(listener, app, tls).await,
    }
}

/// OTLP/HTTP over TLS: each connection's handshake, then hyper serving `app` on it. A
/// refused handshake ends that connection only.
async fn serve_https(
    listener: tokio::net::TcpListener,
    app: axum::Router,
    tls: crate::tls::ServerTls,
) {
    use hyper_util::rt::{TokioExecutor, TokioIo};
    let acceptor = tokio_rustls::TlsAcceptor::from(tls.rustls());
    loop {
        let Ok((tcp, _)) = listener.accept().await else {
            continue;
        };
        let acceptor = acceptor.clone();
        let app = app.clone();
        tokio::spawn(async move {
            let Ok(stream) = acceptor.accept(tcp).await else {
                return;
            };
            let service = hyper_util::service::TowerToHyperService::new(app);
            let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

/// Why an OTLP/HTTP request was refused, sent back as a plain-text body.
type Rejection = (HttpStatus, String);

async fn http_traces(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, Rejection> {
    if !shared.admit(Signal::Traces).await {
        return Err((
            HttpStatus::SERVICE_UNAVAILABLE,
            "the test collector is down".into(),
        ));
    }
    let encoding = BodyEncoding::of(&headers)?;
    let body = gunzip(&headers, body)?;
    let request: ExportTraceServiceRequest = encoding.decode(&body)?;
    shared.record_traces(RequestHeaders::from_http(Signal::Traces, &headers), request);
    Ok(encoding.reply(&ExportTraceServiceResponse::default()))
}

async fn http_metrics(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, Rejection> {
    if !shared.admit(Signal::Metrics).await {
        return Err((
            HttpStatus::SERVICE_UNAVAILABLE,
            "the test collector is down".into(),
        ));
    }
    let encoding = BodyEncoding::of(&headers)?;
    let body = gunzip(&headers, body)?;
    let request: ExportMetricsServiceRequest = encoding.decode(&body)?;
    shared.record_metrics(
        RequestHeaders::from_http(Signal::Metrics, &headers),
        request,
    );
    Ok(encoding.reply(&ExportMetricsServiceResponse::default()))
}

/// The body, decompressed when the request says `content-encoding: gzip`.
fn gunzip(headers: &HeaderMap, body: Bytes) -> Result<Bytes, Rejection> {
    use std::io::Read as _;
    match headers.get(header::CONTENT_ENCODING).map(|v| v.as_bytes()) {
        None | Some(b"identity") => Ok(body),
        Some(b"gzip") => {
            let mut out = Vec::new();
            flate2::read::GzDecoder::new(&body[..])
                .read_to_end(&mut out)
                .map_err(|e| (HttpStatus::BAD_REQUEST, format!("bad gzip body: {e}")))?;
            Ok(Bytes::from(out))
        }
        Some(other) => Err((
            HttpStatus::UNSUPPORTED_MEDIA_TYPE,
            format!(
                "unsupported content-encoding {}",
                String::from_utf8_lossy(other)
            ),
        )),
    }
}

/// The two OTLP/HTTP body encodings; the reply uses the request's.
#[derive(Clone, Copy)]
enum BodyEncoding {
    Protobuf,
    Json,
}

impl BodyEncoding {
    fn of(headers: &HeaderMap) -> Result<BodyEncoding, Rejection> {
        let content_type = headers
            .get(header::CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .unwrap_or("");
        if content_type.starts_with("application/x-protobuf") {
            Ok(BodyEncoding::Protobuf)
        } else if content_type.starts_with("application/json") {
            Ok(BodyEncoding::Json)
        } else {
            let message = format!("unsupported content-type {content_type:?}");
            Err((HttpStatus::UNSUPPORTED_MEDIA_TYPE, message))
        }
    }

    fn content_type(self) -> &'static str {
        match self {
            BodyEncoding::Protobuf => "application/x-protobuf",
            BodyEncoding::Json => "application/json",
        }
    }

    fn decode<T>(self, body: &[u8]) -> Result<T, Rejection>
    where
        T: Message + Default + serde::de::DeserializeOwned,
    {
        let decoded = match self {
            BodyEncoding::Protobuf => T::decode(body).map_err(|e| e.to_string()),
            BodyEncoding::Json => serde_json::from_slice(body).map_err(|e| e.to_string()),
        };
        decoded.map_err(|error| {
            let message = format!("cannot decode the OTLP request: {error}");
            (HttpStatus::BAD_REQUEST, message)
        })
    }

    fn reply<T>(self, response: &T) -> Response
    where
        T: Message + serde::Serialize,
    {
        let body = match self {
            BodyEncoding::Protobuf => response.encode_to_vec(),
            BodyEncoding::Json => serde_json::to_vec(response).expect("encode an OTLP response"),
        };
        ([(header::CONTENT_TYPE, self.content_type())], body).into_response()
    }
}

// ===== flattening ============================================================

fn flatten_spans(requests: &[ExportTraceServiceRequest]) -> Vec<ReceivedSpan> {
    let mut spans = Vec::new();
    for resource_spans in requests.iter().flat_map(|r| &r.resource_spans) {
        let resource_attributes = resource_spans
            .resource
            .as_ref()
            .map(|resource| attributes(&resource.attributes))
            .unwrap_or_default();
        for scope_spans in &resource_spans.scope_spans {
            let scope_name = scope_spans
                .scope
                .as_ref()
                .map(|scope| scope.name.clone())
                .unwrap_or_default();
            for span in &scope_spans.spans {
                spans.push(received_span(span, &resource_attributes, &scope_name));
            }
        }
    }
    spans
}

fn received_span(span: &Span, resource_attributes: &Attributes, scope_name: &str) -> ReceivedSpan {
    let status = span.status.clone().unwrap_or_default();
    ReceivedSpan {
        name: span.name.clone(),
        trace_id: hex(&span.trace_id),
        span_id: hex(&span.span_id),
        parent_span_id: hex(&span.parent_span_id),
        start_time_unix_nano: span.start_time_unix_nano,
        end_time_unix_nano: span.end_time_unix_nano,
        kind: SpanKind::try_from(span.kind).unwrap_or(SpanKind::Unspecified),
        status_code: StatusCode::try_from(status.code).unwrap_or(StatusCode::Unset),
        status_message: status.message,
        attributes: attributes(&span.attributes),
        events: span
            .events
            .iter()
            .map(|event| ReceivedEvent {
                name: event.name.clone(),
                time_unix_nano: event.time_unix_nano,
                attributes: attributes(&event.attributes),
            })
            .collect(),
        resource_attributes: resource_attributes.clone(),
        scope_name: scope_name.to_owned(),
    }
}

fn flatten_points(requests: &[ExportMetricsServiceRequest]) -> Vec<ReceivedPoint> {
    let mut points = Vec::new();
    for resource_metrics in requests.iter().flat_map(|r| &r.resource_metrics) {
        let resource_attributes = resource_metrics
            .resource
            .as_ref()
            .map(|resource| attributes(&resource.attributes))
            .unwrap_or_default();
        for scope_metrics in &resource_metrics.scope_metrics {
            let scope_name = scope_metrics
                .scope
                .as_ref()
                .map(|scope| scope.name.clone())
                .unwrap_or_default();
            for metric in &scope_metrics.metrics {
                // Everything but the point's own fields, filled in per point below.
                let template = ReceivedPoint {
                    name: metric.name.clone(),
                    description: metric.description.clone(),
                    unit: metric.unit.clone(),
                    kind: MetricKind::Other,
                    temporality: None,
                    attributes: Attributes::new(),
                    value: PointValue::Other,
                    start_time_unix_nano: 0,
                    time_unix_nano: 0,
                    resource_attributes: resource_attributes.clone(),
                    scope_name: scope_name.clone(),
                };
                push_points(&mut points, template, metric.data.as_ref());
            }
        }
    }
    points
}

fn push_points(
    points: &mut Vec<ReceivedPoint>,
    template: ReceivedPoint,
    data: Option<&metric::Data>,
) {
    let number_value = |value: Option<number_data_point::Value>| match value {
        Some(number_data_point::Value::AsInt(v)) => PointValue::Int(v),
        Some(number_data_point::Value::AsDouble(v)) => PointValue::Double(v),
        None => PointValue::Other,
    };
    let temporality = |raw: i32| {
        AggregationTemporality::try_from(raw).unwrap_or(AggregationTemporality::Unspecified)
    };

    match data {
        Some(metric::Data::Gauge(gauge)) => {
            points.extend(gauge.data_points.iter().map(|p| ReceivedPoint {
                kind: MetricKind::Gauge,
                attributes: attributes(&p.attributes),
                value: number_value(p.value),
                start_time_unix_nano: p.start_time_unix_nano,
                time_unix_nano: p.time_unix_nano,
                ..template.clone()
            }));
        }
        Some(metric::Data::Sum(sum)) => {
            points.extend(sum.data_points.iter().map(|p| ReceivedPoint {
                kind: MetricKind::Sum {
                    monotonic: sum.is_monotonic,
                },
                temporality: Some(temporality(sum.aggregation_temporality)),
                attributes: attributes(&p.attributes),
                value: number_value(p.value),
                start_time_unix_nano: p.start_time_unix_nano,
                time_unix_nano: p.time_unix_nano,
                ..template.clone()
            }));
        }
        Some(metric::Data::Histogram(histogram)) => {
            points.extend(histogram.data_points.iter().map(|p| ReceivedPoint {
                kind: MetricKind::Histogram,
                temporality: Some(temporality(histogram.aggregation_temporality)),
                attributes: attributes(&p.attributes),
                value: PointValue::Histogram {
                    count: p.count,
                    sum: p.sum,
                    min: p.min,
                    max: p.max,
                    bucket_counts: p.bucket_counts.clone(),
                    explicit_bounds: p.explicit_bounds.clone(),
                },
                start_time_unix_nano: p.start_time_unix_nano,
                time_unix_nano: p.time_unix_nano,
                ..template.clone()
            }));
        }
        Some(metric::Data::ExponentialHistogram(histogram)) => {
            points.extend(histogram.data_points.iter().map(|p| ReceivedPoint {
                attributes: attributes(&p.attributes),
                start_time_unix_nano: p.start_time_unix_nano,
                time_unix_nano: p.time_unix_nano,
                ..template.clone()
            }));
        }
        Some(metric::Data::Summary(summary)) => {
            points.extend(summary.data_points.iter().map(|p| ReceivedPoint {
                attributes: attributes(&p.attributes),
                start_time_unix_nano: p.start_time_unix_nano,
                time_unix_nano: p.time_unix_nano,
                ..template.clone()
            }));
        }
        None => {}
    }
}

fn attributes(key_values: &[KeyValue]) -> Attributes {
    key_values
        .iter()
        .map(|kv| {
            let value = match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                Some(any_value::Value::IntValue(v)) => AttrValue::Int(*v),
                Some(any_value::Value::DoubleValue(v)) => AttrValue::Double(*v),
                Some(any_value::Value::StringValue(v)) => AttrValue::Str(v.clone()),
                Some(any_value::Value::BoolValue(v)) => AttrValue::Bool(*v),
                Some(any_value::Value::ArrayValue(array)) => {
                    let strings: Option<Vec<String>> = array
                        .values
                        .iter()
                        .map(|v| match &v.value {
                            Some(any_value::Value::StringValue(s)) => Some(s.clone()),
                            _ => None,
                        })
                        .collect();
                    strings.map_or(AttrValue::Other, AttrValue::Strs)
                }
                _ => AttrValue::Other,
            };
            (kv.key.clone(), value)
        })
        .collect()
}

fn hex(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        write!(out, "{byte:02x}").expect("writing to a String cannot fail");
    }
    out
}

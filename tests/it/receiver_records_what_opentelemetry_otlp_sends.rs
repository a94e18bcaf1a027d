//! Checks the test receiver against opentelemetry-otlp itself, used directly:
//! whatever the receiver reports is what a real OTLP exporter sent.
//!
//! These tests also pin down what the exporters need from tokio when driven
//! by the SDK's thread-based `BatchSpanProcessor` and `PeriodicReader` (which
//! export from their own plain threads with `futures_executor::block_on`):
//!
//! * gRPC (tonic): the exporter must be *built* with a tokio runtime entered,
//!   because building spawns tonic's channel worker with `tokio::spawn`.
//!   Exports may then be polled from any thread, runtime or not, but only
//!   complete while that runtime keeps running on threads of its own (a
//!   multi-thread runtime), since it drives tonic's worker and connections.
//! * HTTP: building needs no runtime. With the async reqwest client (the
//!   `reqwest-client` feature, which opentelemetry-otlp prefers over
//!   `reqwest-blocking-client` when both are on), every export must be polled
//!   with a running runtime entered: on a thread without one it panics. With
//!   the blocking client, exports work on any thread that is not itself
//!   inside a runtime.
//!
//! [`InRuntime`] below is the one wrapper that satisfies all of these: each
//! poll of an export future runs with a dedicated multi-thread runtime
//! entered, whatever thread the SDK polls it from.

use gpuspan_test_support as support;

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::task::Poll;
use std::time::Duration;

use opentelemetry::metrics::MeterProvider as _;
use opentelemetry::trace::{Span as _, TraceContextExt as _, Tracer as _, TracerProvider as _};
use opentelemetry::{Context, KeyValue};
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig, WithTonicConfig};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::metrics::data::ResourceMetrics;
use opentelemetry_sdk::metrics::exporter::PushMetricExporter;
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider, Temporality};
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, SdkTracerProvider, SpanData, SpanExporter,
};
use opentelemetry_sdk::Resource;

use support::receiver::{
    unused_endpoint, AttrValue, MetricKind, ReceivedSpan, Receiver, RequestHeaders, Signal,
    SpanKind, StatusCode,
};

const SERVICE: &str = "receiver-self-test";
const API_KEY: &str = "x-api-key";
const API_KEY_VALUE: &str = "s3cr3t";

/// A runtime standing in for the one a library keeps for its exporters:
/// multi-threaded, so it makes progress on its own worker thread whatever the
/// thread that waits on an export is doing.
fn exporter_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("build the exporter runtime")
}

/// An exporter whose exports are always polled with `runtime` entered, so
/// that the SDK's processor and reader threads can drive it.
#[derive(Debug)]
struct InRuntime<E> {
    exporter: E,
    runtime: tokio::runtime::Handle,
}

impl<E> InRuntime<E> {
    fn new(exporter: E, runtime: &tokio::runtime::Runtime) -> Self {
        InRuntime {
            exporter,
            runtime: runtime.handle().clone(),
        }
    }

    fn entered<F: Future>(&self, future: F) -> Entered<F> {
        Entered {
            runtime: self.runtime.clone(),
            future: Box::pin(future),
        }
    }
}

/// A future polled with a runtime entered. The guard lives only inside
/// `poll`, so the future stays `Send`.
struct Entered<F> {
    runtime: tokio::runtime::Handle,
    future: Pin<Box<F>>,
}

impl<F: Future> Future for Entered<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> Poll<F::Output> {
        let this = self.get_mut();
        let _entered = this.runtime.enter();
        this.future.as_mut().poll(cx)
    }
}

impl<E: SpanExporter> SpanExporter for InRuntime<E> {
    fn export(&self, batch: Vec<SpanData>) -> impl Future<Output = OTelSdkResult> + Send {
        self.entered(self.exporter.export(batch))
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.exporter.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.exporter.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.exporter.set_resource(resource);
    }
}

impl<E: PushMetricExporter> PushMetricExporter for InRuntime<E> {
    fn export(&self, metrics: &ResourceMetrics) -> impl Future<Output = OTelSdkResult> + Send {
        self.entered(self.exporter.export(metrics))
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.exporter.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.exporter.shutdown_with_timeout(timeout)
    }

    fn temporality(&self) -> Temporality {
        self.exporter.temporality()
    }
}

fn resource() -> Resource {
    Resource::builder().with_service_name(SERVICE).build()
}

fn api_key_metadata() -> tonic::metadata::MetadataMap {
    let mut metadata = tonic::metadata::MetadataMap::new();
    metadata.insert(
        API_KEY,
        API_KEY_VALUE.parse().expect("ascii metadata value"),
    );
    metadata
}

fn api_key_headers() -> HashMap<String, String> {
    HashMap::from([(API_KEY.to_owned(), API_KEY_VALUE.to_owned())])
}

fn grpc_span_exporter(receiver: &Receiver) -> opentelemetry_otlp::SpanExporter {
    opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .with_endpoint(receiver.endpoint())
        .with_metadata(api_key_metadata())
        .build()
        .expect("build the gRPC span exporter")
}

fn http_span_exporter(receiver: &Receiver) -> opentelemetry_otlp::SpanExporter {
    opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .with_endpoint(receiver.traces_url())
        .with_headers(api_key_headers())
        .build()
        .expect("build the HTTP span exporter")
}

/// Ends a parent span and, inside it, a child span with one attribute of
/// each kind tests assert on. Returns the SDK's (trace id, parent span id,
/// child span id), lower-case hex.
fn record_parent_and_child(provider: &SdkTracerProvider) -> (String, String, String) {
    let tracer = provider.tracer("receiver-self-test-scope");
    let parent = tracer.start("parent");
    let parent_cx = Context::current_with_span(parent);
    let mut child = tracer.start_with_context("child", &parent_cx);
    child.set_attribute(KeyValue::new("gpu.index", 3_i64));
    child.set_attribute(KeyValue::new("gpu.name", "H200"));
    child.set_attribute(KeyValue::new("gpu.utilization", 0.5_f64));
    child.set_attribute(KeyValue::new("gpu.mig", false));
    child.add_event("peak", vec![KeyValue::new("bytes", 1024_i64)]);
    let ids = (
        child.span_context().trace_id().to_string(),
        parent_cx.span().span_context().span_id().to_string(),
        child.span_context().span_id().to_string(),
    );
    child.end();
    parent_cx.span().end();
    ids
}

/// Asserts the receiver holds exactly the spans of [`record_parent_and_child`].
fn assert_parent_and_child(receiver: &Receiver, ids: (String, String, String)) {
    let (trace_id, parent_id, child_id) = ids;
    let spans = receiver.spans();
    let names: Vec<&str> = spans.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names.len(), 2, "spans received: {names:?}");

    let parent = only(receiver.spans_named("parent"));
    let child = only(receiver.spans_named("child"));

    assert_eq!(parent.trace_id, trace_id);
    assert_eq!(parent.span_id, parent_id);
    assert!(parent.is_root(), "parent has a parent: {parent:?}");
    assert_eq!(child.trace_id, trace_id);
    assert_eq!(child.span_id, child_id);
    assert_eq!(child.parent_span_id, parent_id);
    assert!(child.is_child_of(&parent));

    assert_eq!(child.kind, SpanKind::Internal);
    assert_eq!(child.status_code, StatusCode::Unset);
    assert!(child.start_time_unix_nano >= parent.start_time_unix_nano);
    assert!(child.end_time_unix_nano <= parent.end_time_unix_nano);
    assert!(child.start_time_unix_nano <= child.end_time_unix_nano);

    assert_eq!(child.int_attr("gpu.index"), Some(3));
    assert_eq!(child.str_attr("gpu.name"), Some("H200"));
    assert_eq!(child.double_attr("gpu.utilization"), Some(0.5));
    assert_eq!(child.bool_attr("gpu.mig"), Some(false));
    // Typed: an i64 is not a string, and vice versa.
    assert_eq!(child.str_attr("gpu.index"), None);
    assert_eq!(child.int_attr("gpu.name"), None);
    assert_eq!(child.attributes.len(), 4, "{:?}", child.attributes);
    assert!(parent.attributes.is_empty(), "{:?}", parent.attributes);

    let peak = only(child.events_named("peak"));
    assert_eq!(peak.int_attr("bytes"), Some(1024));

    for span in [&parent, &child] {
        assert_eq!(span.resource_str_attr("service.name"), Some(SERVICE));
        assert_eq!(span.scope_name, "receiver-self-test-scope");
    }
}

fn assert_api_key_on_every_request(headers: &[RequestHeaders]) {
    assert!(!headers.is_empty(), "no request recorded");
    for request in headers {
        assert_eq!(request.get(API_KEY), Some(API_KEY_VALUE), "{request:?}");
        assert_eq!(
            request.get("X-Api-Key"),
            Some(API_KEY_VALUE),
            "lookup ignores case"
        );
    }
}

fn only<T: std::fmt::Debug>(mut items: Vec<T>) -> T {
    assert_eq!(items.len(), 1, "expected exactly one: {items:?}");
    items.pop().expect("one item")
}

// ===== traces ================================================================

#[test]
fn grpc_batch_exporter_spans_arrive_with_parent_link_typed_attributes_and_metadata() {
    let receiver = Receiver::start_grpc();
    let runtime = exporter_runtime();
    // Building needs the runtime entered; exporting does not (see below).
    let exporter = {
        let _entered = runtime.enter();
        grpc_span_exporter(&receiver)
    };
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource())
        .build();

    // Spans end on this plain test thread; the batch processor's own thread
    // polls the export with no runtime entered, while `runtime` does the I/O.
    let ids = record_parent_and_child(&provider);
    provider
        .shutdown()
        .expect("shutdown flushes to the receiver");

    assert_eq!(receiver.trace_requests(), 1);
    assert_parent_and_child(&receiver, ids);
    let headers = receiver.headers();
    assert_api_key_on_every_request(&headers);
    assert!(headers.iter().all(|h| h.signal == Signal::Traces));
    assert_eq!(headers[0].get("content-type"), Some("application/grpc"));
}

#[test]
fn grpc_simple_exporter_exports_from_the_thread_that_ends_the_span() {
    let receiver = Receiver::start_grpc();
    let runtime = exporter_runtime();
    let exporter = {
        let _entered = runtime.enter();
        grpc_span_exporter(&receiver)
    };
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter)
        .with_resource(resource())
        .build();

    let ids = record_parent_and_child(&provider);
    // The simple processor exported each span as it ended, before shutdown.
    assert_eq!(receiver.trace_requests(), 2);
    provider.shutdown().expect("shutdown");

    assert_parent_and_child(&receiver, ids);
    assert_api_key_on_every_request(&receiver.headers());
}

#[test]
fn grpc_exporter_cannot_be_built_outside_a_tokio_runtime() {
    // The channel connects lazily, so no server is needed to see this.
    let endpoint = unused_endpoint();
    let built = std::panic::catch_unwind(|| {
        opentelemetry_otlp::SpanExporter::builder()
            .with_tonic()
            .with_endpoint(endpoint)
            .build()
    });
    let panic = built.expect_err("building the tonic exporter without a runtime panics");
    let message = panic
        .downcast_ref::<String>()
        .map(String::as_str)
        .or_else(|| panic.downcast_ref::<&str>().copied())
        .unwrap_or_default();
    assert!(message.contains("Tokio 1.x runtime"), "{message}");
}

#[tokio::test]
async fn grpc_exporter_tied_to_a_blocked_current_thread_runtime_exports_nothing() {
    // Built here, tonic's worker lives on this test's single-threaded runtime,
    // which cannot run it while this thread blocks in shutdown: the batch
    // thread's export waits forever and shutdown times out.
    let receiver = Receiver::start_grpc();
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(grpc_span_exporter(&receiver))
        .build();
    record_parent_and_child(&provider);

    let shutdown = provider.shutdown_with_timeout(Duration::from_millis(300));
    assert!(shutdown.is_err(), "{shutdown:?}");
    assert_eq!(receiver.trace_requests(), 0);
}

#[test]
fn http_batch_exporter_spans_arrive_when_exports_run_in_a_runtime() {
    let receiver = Receiver::start_http();
    let runtime = exporter_runtime();
    // Building the HTTP exporter needs no runtime.
    let exporter = InRuntime::new(http_span_exporter(&receiver), &runtime);
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource())
        .build();

    let ids = record_parent_and_child(&provider);
    provider
        .shutdown()
        .expect("shutdown flushes to the receiver");

    assert_eq!(receiver.trace_requests(), 1);
    assert_parent_and_child(&receiver, ids);
    let headers = receiver.headers();
    assert_api_key_on_every_request(&headers);
    assert_eq!(
        headers[0].get("content-type"),
        Some("application/x-protobuf")
    );
}

#[test]
fn http_simple_exporter_spans_arrive_when_exports_run_in_a_runtime() {
    let receiver = Receiver::start_http();
    let runtime = exporter_runtime();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(InRuntime::new(http_span_exporter(&receiver), &runtime))
        .with_resource(resource())
        .build();

    let ids = record_parent_and_child(&provider);
    assert_eq!(receiver.trace_requests(), 2);
    provider.shutdown().expect("shutdown");

    assert_parent_and_child(&receiver, ids);
    assert_api_key_on_every_request(&receiver.headers());
}

#[tokio::test]
async fn inside_a_tokio_test_exporters_work_on_a_runtime_of_their_own() {
    let grpc = Receiver::start_grpc();
    let http = Receiver::start_http();
    // Creating a runtime inside another one is fine; dropping it here is not
    // (tokio panics: "Cannot drop a runtime in a context where blocking is
    // not allowed"), hence `shutdown_background` below.
    let runtime = exporter_runtime();
    let grpc_exporter = {
        let _entered = runtime.enter();
        InRuntime::new(grpc_span_exporter(&grpc), &runtime)
    };
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(grpc_exporter)
        .with_batch_exporter(InRuntime::new(http_span_exporter(&http), &runtime))
        .with_resource(resource())
        .build();

    let ids = record_parent_and_child(&provider);
    // Blocking this thread is harmless: the exports run on `runtime`.
    provider
        .shutdown()
        .expect("shutdown flushes to both receivers");
    runtime.shutdown_background();

    assert_parent_and_child(&grpc, ids.clone());
    assert_parent_and_child(&http, ids);
}

#[test]
fn wait_for_spans_returns_once_the_predicate_holds() {
    let receiver = Receiver::start_http();
    let runtime = exporter_runtime();
    let exporter = InRuntime::new(http_span_exporter(&receiver), &runtime);
    let every_100ms = BatchConfigBuilder::default()
        .with_scheduled_delay(Duration::from_millis(100))
        .build();
    let processor = BatchSpanProcessor::builder(exporter)
        .with_batch_config(every_100ms)
        .build();
    let provider = SdkTracerProvider::builder()
        .with_span_processor(processor)
        .build();
    record_parent_and_child(&provider);
    // No flush: the batch processor exports on its own schedule.
    let spans = receiver.wait_for_spans(|spans| spans.len() >= 2, Duration::from_secs(30));
    assert_eq!(spans.len(), 2, "{spans:?}");
    provider.shutdown().expect("shutdown");

    let timed_out: Vec<ReceivedSpan> =
        receiver.wait_for_spans(|spans| spans.len() > 2, Duration::from_millis(50));
    assert_eq!(
        timed_out.len(),
        2,
        "returns what arrived when the wait times out"
    );
}

// ===== metrics ===============================================================

/// Records a monotonic counter (7 in total, one attribute) and an f64 gauge,
/// then shuts the provider down, which collects and exports once.
fn record_counter_and_gauge(provider: SdkMeterProvider) {
    let meter = provider.meter("receiver-self-test-meter");
    let counter = meter
        .u64_counter("test.requests")
        .with_unit("{request}")
        .with_description("requests seen")
        .build();
    counter.add(3, &[KeyValue::new("gpu.index", 0_i64)]);
    counter.add(4, &[KeyValue::new("gpu.index", 0_i64)]);
    let gauge = meter.f64_gauge("test.temperature").with_unit("Cel").build();
    gauge.record(41.5, &[KeyValue::new("gpu.name", "H200")]);
    provider.shutdown().expect("shutdown exports the metrics");
}

fn meter_provider(exporter: impl PushMetricExporter) -> SdkMeterProvider {
    // An interval longer than any test: only shutdown exports.
    let reader = PeriodicReader::builder(exporter)
        .with_interval(Duration::from_secs(3600))
        .build();
    SdkMeterProvider::builder()
        .with_reader(reader)
        .with_resource(resource())
        .build()
}

fn assert_counter_and_gauge(receiver: &Receiver) {
    assert_eq!(receiver.metric_requests(), 1);
    let points = receiver.metric_points();
    assert_eq!(points.len(), 2, "{points:?}");

    let requests = only(receiver.points_named("test.requests"));
    assert_eq!(requests.kind, MetricKind::Sum { monotonic: true });
    assert_eq!(requests.unit, "{request}");
    assert_eq!(requests.description, "requests seen");
    assert_eq!(requests.as_int(), Some(7));
    assert_eq!(requests.as_double(), None);
    assert_eq!(requests.int_attr("gpu.index"), Some(0));
    assert_eq!(requests.attributes.len(), 1);
    assert_eq!(requests.resource_str_attr("service.name"), Some(SERVICE));
    assert_eq!(requests.scope_name, "receiver-self-test-meter");
    assert!(requests.time_unix_nano > 0);

    let temperature = only(receiver.points_named("test.temperature"));
    assert_eq!(temperature.kind, MetricKind::Gauge);
    assert_eq!(temperature.unit, "Cel");
    assert_eq!(temperature.as_double(), Some(41.5));
    assert_eq!(temperature.str_attr("gpu.name"), Some("H200"));
    assert_eq!(
        temperature.attributes.get("gpu.name"),
        Some(&AttrValue::Str("H200".into()))
    );

    let headers = receiver.headers();
    assert_api_key_on_every_request(&headers);
    assert!(headers.iter().all(|h| h.signal == Signal::Metrics));
}

#[test]
fn grpc_metric_points_arrive_through_a_periodic_reader() {
    let receiver = Receiver::start_grpc();
    let runtime = exporter_runtime();
    let exporter = {
        let _entered = runtime.enter();
        opentelemetry_otlp::MetricExporter::builder()
            .with_tonic()
            .with_endpoint(receiver.endpoint())
            .with_metadata(api_key_metadata())
            .build()
            .expect("build the gRPC metric exporter")
    };
    // As for spans, the reader's thread needs no runtime entered for gRPC.
    record_counter_and_gauge(meter_provider(exporter));
    assert_counter_and_gauge(&receiver);
}

#[test]
fn http_metric_points_arrive_through_a_periodic_reader() {
    let receiver = Receiver::start_http();
    let runtime = exporter_runtime();
    let exporter = opentelemetry_otlp::MetricExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .with_endpoint(receiver.metrics_url())
        .with_headers(api_key_headers())
        .build()
        .expect("build the HTTP metric exporter");
    record_counter_and_gauge(meter_provider(InRuntime::new(exporter, &runtime)));
    assert_counter_and_gauge(&receiver);
}

#[test]
fn wait_for_points_returns_the_named_metric_once_it_arrives() {
    let receiver = Receiver::start_http();
    let runtime = exporter_runtime();
    let exporter = opentelemetry_otlp::MetricExporter::builder()
        .with_http()
        .with_endpoint(receiver.metrics_url())
        .build()
        .expect("build the HTTP metric exporter");
    let reader = PeriodicReader::builder(InRuntime::new(exporter, &runtime))
        .with_interval(Duration::from_millis(100))
        .build();
    let provider = SdkMeterProvider::builder().with_reader(reader).build();
    let level = provider
        .meter("m")
        .i64_up_down_counter("test.level")
        .build();
    level.add(-2, &[]);

    // No flush: the reader exports on its own schedule.
    let points = receiver.wait_for_points("test.level", Duration::from_secs(30));
    assert!(!points.is_empty());
    assert_eq!(points[0].kind, MetricKind::Sum { monotonic: false });
    assert_eq!(points[0].as_int(), Some(-2));
    provider.shutdown().expect("shutdown");
}

// ===== the receiver's own plumbing ===========================================

#[test]
fn endpoints_point_at_the_bound_port() {
    let grpc = Receiver::start_grpc();
    let http = Receiver::start_http();
    assert_eq!(grpc.endpoint(), format!("http://127.0.0.1:{}", grpc.port()));
    assert_eq!(http.endpoint(), format!("http://127.0.0.1:{}", http.port()));
    assert_eq!(http.traces_url(), format!("{}/v1/traces", http.endpoint()));
    assert_eq!(
        http.metrics_url(),
        format!("{}/v1/metrics", http.endpoint())
    );
    assert_ne!(grpc.port(), http.port());
}

#[test]
fn nothing_listens_on_an_unused_endpoint_or_a_stopped_receiver() {
    let endpoint = unused_endpoint();
    let addr = endpoint.trim_start_matches("http://");
    assert!(std::net::TcpStream::connect(addr).is_err(), "{endpoint}");

    let mut receiver = Receiver::start_http();
    let addr = format!("127.0.0.1:{}", receiver.port());
    assert!(std::net::TcpStream::connect(&addr).is_ok());
    receiver.stop();
    assert!(std::net::TcpStream::connect(&addr).is_err());
    receiver.stop();
}

#[test]
fn http_receiver_accepts_otlp_json() {
    use std::io::{Read as _, Write as _};

    let receiver = Receiver::start_http();
    let body = r#"{"resourceSpans":[{"resource":{"attributes":[
        {"key":"service.name","value":{"stringValue":"json-client"}}]},
        "scopeSpans":[{"scope":{"name":"json-scope"},"spans":[{
        "traceId":"5b8efff798038103d269b633813fc60c","spanId":"eee19b7ec3c1b174",
        "parentSpanId":"eee19b7ec3c1b173","name":"from-json","kind":2,
        "startTimeUnixNano":"1000","endTimeUnixNano":"2000",
        "attributes":[{"key":"n","value":{"intValue":"42"}}],
        "status":{"code":2,"message":"boom"}}]}]}]}"#;
    let request = format!(
        "POST /v1/traces HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
         X-Api-Key: {API_KEY_VALUE}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let mut stream =
        std::net::TcpStream::connect(receiver.endpoint().trim_start_matches("http://"))
            .expect("connect to the receiver");
    stream.write_all(request.as_bytes()).expect("send");
    let mut response = String::new();
    stream
        .read_to_string(&mut response)
        .expect("read the reply");
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    assert!(response.contains("application/json"), "{response}");

    let span = only(receiver.spans());
    assert_eq!(span.name, "from-json");
    assert_eq!(span.trace_id, "5b8efff798038103d269b633813fc60c");
    assert_eq!(span.span_id, "eee19b7ec3c1b174");
    assert_eq!(span.parent_span_id, "eee19b7ec3c1b173");
    assert_eq!(span.kind, SpanKind::Server);
    assert_eq!(
        (span.start_time_unix_nano, span.end_time_unix_nano),
        (1000, 2000)
    );
    assert_eq!(span.int_attr("n"), Some(42));
    assert_eq!(span.status_code, StatusCode::Error);
    assert_eq!(span.status_message, "boom");
    assert_eq!(span.resource_str_attr("service.name"), Some("json-client"));
    assert_eq!(span.scope_name, "json-scope");
    assert_api_key_on_every_request(&receiver.headers());
}

#[test]
fn http_receiver_rejects_an_undecodable_body_and_records_nothing() {
    use std::io::{Read as _, Write as _};

    let receiver = Receiver::start_http();
    let body = [0xff_u8, 0xff, 0xff];
    let head = format!(
        "POST /v1/metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\
         Content-Type: application/x-protobuf\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let mut stream =
        std::net::TcpStream::connect(receiver.endpoint().trim_start_matches("http://"))
            .expect("connect to the receiver");
    stream.write_all(head.as_bytes()).expect("send head");
    stream.write_all(&body).expect("send body");
    let mut response = String::new();
    stream
        .read_to_string(&mut response)
        .expect("read the reply");
    assert!(response.starts_with("HTTP/1.1 400"), "{response}");
    assert_eq!(receiver.metric_requests(), 0);
    assert!(receiver.headers().is_empty());
}

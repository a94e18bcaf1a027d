//! Spans from opentelemetry-otlp's gRPC and HTTP exporters, batch and simple, arrive with
//! their parent link, typed attributes and metadata, and the exporters' need of a tokio
//! runtime is what the parent module says.

use super::*;

use support::receiver::Protocol as Transport;

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

/// A gRPC span exporter to `receiver`, built with `runtime` entered as building one needs;
/// exporting does not (see the parent module).
fn grpc_span_exporter_on(
    runtime: &tokio::runtime::Runtime,
    receiver: &Receiver,
) -> opentelemetry_otlp::SpanExporter {
    let _entered = runtime.enter();
    grpc_span_exporter(receiver)
}

/// How a provider hands the spans to its exporter.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Processor {
    /// In batches, from the processor's own thread.
    Batch,
    /// Each span as it ends, from the thread that ends it.
    Simple,
}

/// A provider that exports through `exporter` with `processor`, with the test's resource.
fn provider_exporting_to(
    exporter: impl SpanExporter + 'static,
    processor: Processor,
) -> SdkTracerProvider {
    let builder = SdkTracerProvider::builder().with_resource(resource());
    match processor {
        Processor::Batch => builder.with_batch_exporter(exporter).build(),
        Processor::Simple => builder.with_simple_exporter(exporter).build(),
    }
}

/// Records [`record_parent_and_child`] on a plain test thread through a provider
/// exporting to a receiver for `transport` with `processor`, and shuts it down. Asserts
/// the receiver got exactly those spans, in one request for the batch or one per span,
/// with the API key on every request; returns the requests' headers.
fn export_parent_and_child(transport: Transport, processor: Processor) -> Vec<RequestHeaders> {
    let receiver = Receiver::start(transport);
    let runtime = exporter_runtime();
    // The exporters poll their exports with no runtime entered, while `runtime` does the
    // I/O: gRPC's as built, HTTP's through `InRuntime`.
    let provider = match transport {
        Transport::Grpc => {
            provider_exporting_to(grpc_span_exporter_on(&runtime, &receiver), processor)
        }
        Transport::Http => {
            let exporter = InRuntime::new(http_span_exporter(&receiver), &runtime);
            provider_exporting_to(exporter, processor)
        }
    };
    let ids = record_parent_and_child(&provider);
    if processor == Processor::Simple {
        // The simple processor exported each span as it ended, before shutdown.
        assert_eq!(receiver.trace_requests(), 2);
    }
    provider
        .shutdown()
        .expect("shutdown flushes to the receiver");
    let requests = if processor == Processor::Batch { 1 } else { 2 };
    assert_eq!(receiver.trace_requests(), requests);
    assert_parent_and_child(&receiver, ids);
    let headers = receiver.headers();
    assert_api_key_on_every_request(&headers);
    headers
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

#[test]
fn grpc_batch_exporter_spans_arrive_with_parent_link_typed_attributes_and_metadata() {
    let headers = export_parent_and_child(Transport::Grpc, Processor::Batch);
    assert!(headers.iter().all(|h| h.signal == Signal::Traces));
    assert_eq!(headers[0].get("content-type"), Some("application/grpc"));
}

#[test]
fn grpc_simple_exporter_exports_from_the_thread_that_ends_the_span() {
    export_parent_and_child(Transport::Grpc, Processor::Simple);
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
    let headers = export_parent_and_child(Transport::Http, Processor::Batch);
    assert_eq!(
        headers[0].get("content-type"),
        Some("application/x-protobuf")
    );
}

#[test]
fn http_simple_exporter_spans_arrive_when_exports_run_in_a_runtime() {
    export_parent_and_child(Transport::Http, Processor::Simple);
}

#[tokio::test]
async fn inside_a_tokio_test_exporters_work_on_a_runtime_of_their_own() {
    let grpc = Receiver::start_grpc();
    let http = Receiver::start_http();
    // Creating a runtime inside another one is fine; dropping it here is not
    // (tokio panics: "Cannot drop a runtime in a context where blocking is
    // not allowed"), hence `shutdown_background` below.
    let runtime = exporter_runtime();
    let grpc_exporter = InRuntime::new(grpc_span_exporter_on(&runtime, &grpc), &runtime);
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

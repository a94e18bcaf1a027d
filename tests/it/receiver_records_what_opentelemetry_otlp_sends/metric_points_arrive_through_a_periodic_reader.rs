//! A counter and a gauge recorded through the SDK's periodic reader arrive over gRPC and
//! HTTP with their points, units and attributes.

use super::*;

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

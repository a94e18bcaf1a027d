// A test binary of its own: it counts every allocation of the process.
//! `gpuspan collect` refuses, before decoding it, a request it cannot hold: it reads from
//! the body what decoding it will allocate. That figure must cover what decoding really
//! allocates at its peak, measured here with a counting allocator, in protobuf and in
//! OTLP/JSON (whose decoder copies attribute values and metric data into generic trees
//! first), for requests as SDKs send them and for hostile ones.
#![cfg(feature = "__bench")]

use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{
    any_value, AnyValue, ArrayValue, KeyValue, KeyValueList,
};
use opentelemetry_proto::tonic::metrics::v1::{
    exemplar, metric, number_data_point, Exemplar, Gauge, Histogram, HistogramDataPoint, Metric,
    NumberDataPoint, ResourceMetrics, ScopeMetrics,
};
use opentelemetry_proto::tonic::trace::v1::{span, Span};

use gpuspan_test_support::counting_alloc::{peak_of, Counting};
use gpuspan_test_support::otlp_requests::{empty_spans_request, kv, traces};

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn check(what: &str, json: bool, traces: bool, body: &[u8]) {
    let bound = gpuspan_cli::collect::__decoded_bound(json, traces, body)
        .unwrap_or_else(|| panic!("{what}: the bound does not read it"));
    let peak = peak_of(|| match (json, traces) {
        (false, true) => {
            let _: ExportTraceServiceRequest = prost::Message::decode(body).unwrap();
        }
        (false, false) => {
            let _: ExportMetricsServiceRequest = prost::Message::decode(body).unwrap();
        }
        (true, true) => {
            let _: ExportTraceServiceRequest = serde_json::from_slice(body).unwrap();
        }
        (true, false) => {
            let _: ExportMetricsServiceRequest = serde_json::from_slice(body).unwrap();
        }
    });
    eprintln!(
        "{what}: {} bytes, decoding allocates {peak} at its peak, bound {bound} ({:.2}x)",
        body.len(),
        bound as f64 / peak as f64
    );
    assert!(
        bound >= peak,
        "{what}: bound {bound} < {peak} allocated at the peak"
    );
}

fn attributes(i: u64) -> Vec<KeyValue> {
    vec![
        kv("ml.step", any_value::Value::IntValue(i as i64)),
        kv("loss", any_value::Value::DoubleValue(0.25)),
        kv("phase", any_value::Value::StringValue("train".into())),
        kv(
            "note",
            any_value::Value::StringValue("a \"quoted\"\nline".into()),
        ),
    ]
}

fn sdk_span(i: u64) -> Span {
    Span {
        attributes: attributes(i),
        events: vec![span::Event {
            name: "checkpoint".into(),
            attributes: attributes(i),
            ..Default::default()
        }],
        ..gpuspan_test_support::otlp_requests::sdk_span(i)
    }
}

/// Attributes whose values nest arrays and key-value lists `depth` deep.
fn nested_span(depth: usize) -> Span {
    let mut value = AnyValue {
        value: Some(any_value::Value::KvlistValue(KeyValueList {
            values: attributes(1),
        })),
    };
    for _ in 0..depth {
        value = AnyValue {
            value: Some(any_value::Value::ArrayValue(ArrayValue {
                values: vec![value.clone(), value],
            })),
        };
    }
    Span {
        name: "nested".into(),
        attributes: vec![KeyValue {
            key: "tree".into(),
            value: Some(value),
            ..Default::default()
        }],
        ..Default::default()
    }
}

fn metrics() -> ExportMetricsServiceRequest {
    let point = |i: u64| NumberDataPoint {
        attributes: attributes(i),
        exemplars: vec![Exemplar {
            filtered_attributes: attributes(i),
            span_id: vec![1; 8],
            trace_id: vec![2; 16],
            value: Some(exemplar::Value::AsDouble(0.5)),
            ..Default::default()
        }],
        value: Some(number_data_point::Value::AsInt(7)),
        ..Default::default()
    };
    let gauge = Metric {
        name: "gpu.memory.used".into(),
        unit: "By".into(),
        data: Some(metric::Data::Gauge(Gauge {
            data_points: (0..500).map(point).collect(),
        })),
        ..Default::default()
    };
    let histogram = Metric {
        name: "step.duration".into(),
        data: Some(metric::Data::Histogram(Histogram {
            data_points: vec![
                HistogramDataPoint {
                    attributes: attributes(1),
                    bucket_counts: (0..100).collect(),
                    explicit_bounds: (0..99).map(f64::from).collect(),
                    ..Default::default()
                };
                20
            ],
            aggregation_temporality: 1,
        })),
        ..Default::default()
    };
    ExportMetricsServiceRequest {
        resource_metrics: vec![ResourceMetrics {
            scope_metrics: vec![ScopeMetrics {
                metrics: vec![gauge, histogram],
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

/// One test, so that no other test thread allocates while one is counted.
#[test]
fn the_bound_covers_the_peak_of_decoding_in_protobuf_and_json() {
    let sdk = traces((0..20_000).map(sdk_span).collect());
    let nested = traces((0..50).map(|_| nested_span(8)).collect());
    let metrics = metrics();
    for (what, request) in [("SDK spans", &sdk), ("nested values", &nested)] {
        check(what, false, true, &prost::Message::encode_to_vec(request));
        check(what, true, true, &serde_json::to_vec(request).unwrap());
    }
    check(
        "metrics",
        false,
        false,
        &prost::Message::encode_to_vec(&metrics),
    );
    check(
        "metrics",
        true,
        false,
        &serde_json::to_vec(&metrics).unwrap(),
    );

    // Hostile: empty spans, and a deep chain of arrays over many values in JSON, which
    // serde copies once per level.
    let empty = 200_000;
    check("empty spans", false, true, &empty_spans_request(empty));
    let json = format!(
        "{{\"resourceSpans\":[{{\"scopeSpans\":[{{\"spans\":[{}{{}}]}}]}}]}}",
        "{},".repeat(empty - 1)
    );
    check("empty JSON spans", true, true, json.as_bytes());
    let mut value = format!(
        "{{\"arrayValue\":{{\"values\":[{}{{\"intValue\":\"1\"}}]}}}}",
        "{\"stringValue\":\"x\"},".repeat(20_000)
    );
    for _ in 0..30 {
        value = format!("{{\"arrayValue\":{{\"values\":[{value}]}}}}");
    }
    let chain = format!(
        "{{\"resourceSpans\":[{{\"scopeSpans\":[{{\"spans\":[{{\"attributes\":[{{\"key\":\"a\",\
         \"value\":{value}}}]}}]}}]}}]}}"
    );
    check("nested JSON chain", true, true, chain.as_bytes());
}

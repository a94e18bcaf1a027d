// A test binary of its own: it counts every allocation of the process.
//! `gpuspan collect` refuses, before decoding it, a request it cannot hold: it reads from
//! the body what decoding it will allocate. That figure must cover what decoding really
//! allocates at its peak, measured here with a counting allocator, in protobuf and in
//! OTLP/JSON (whose decoder copies attribute values and metric data into generic trees
//! first), for requests as SDKs send them and for hostile ones.
#![cfg(feature = "__bench")]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{
    any_value, AnyValue, ArrayValue, KeyValue, KeyValueList,
};
use opentelemetry_proto::tonic::metrics::v1::{
    exemplar, metric, number_data_point, Exemplar, Gauge, Histogram, HistogramDataPoint, Metric,
    NumberDataPoint, ResourceMetrics, ScopeMetrics,
};
use opentelemetry_proto::tonic::trace::v1::{span, ResourceSpans, ScopeSpans, Span, Status};

/// Bytes allocated and not yet freed, and the most at once since the last reset.
struct Counting;
static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

fn grew(bytes: usize) {
    let live = LIVE.fetch_add(bytes, Ordering::Relaxed) + bytes;
    PEAK.fetch_max(live, Ordering::Relaxed);
}

// SAFETY: every call is passed on to the system allocator unchanged; only counted.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        grew(layout.size());
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }
    // A vector that grows is counted by how much it grew: large blocks grow in place
    // (glibc remaps them), and the copy of a small one lasts an instant.
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if new_size >= layout.size() {
            grew(new_size - layout.size());
        } else {
            LIVE.fetch_sub(layout.size() - new_size, Ordering::Relaxed);
        }
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// The most bytes `decode` had allocated at once, beyond what was live before.
fn peak_of(decode: impl FnOnce()) -> usize {
    let before = LIVE.load(Ordering::Relaxed);
    PEAK.store(before, Ordering::Relaxed);
    decode();
    PEAK.load(Ordering::Relaxed) - before
}

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

fn kv(key: &str, value: any_value::Value) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue { value: Some(value) }),
        ..Default::default()
    }
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
        trace_id: vec![7; 16],
        span_id: (i + 1).to_be_bytes().to_vec(),
        parent_span_id: vec![9; 8],
        name: "step".into(),
        kind: 1,
        start_time_unix_nano: 1_700_000_000_000_000_000 + i,
        end_time_unix_nano: 1_700_000_000_000_100_000 + i,
        attributes: attributes(i),
        events: vec![span::Event {
            name: "checkpoint".into(),
            attributes: attributes(i),
            ..Default::default()
        }],
        status: Some(Status {
            message: "ok".into(),
            code: 1,
        }),
        ..Default::default()
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

fn traces(spans: Vec<Span>) -> ExportTraceServiceRequest {
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            scope_spans: vec![ScopeSpans {
                spans,
                ..Default::default()
            }],
            ..Default::default()
        }],
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
    let mut body = vec![0x0a];
    let scope: Vec<u8> = [0x12u8, 0x00].repeat(empty);
    let mut resource = vec![0x12];
    prost::encoding::encode_varint(scope.len() as u64, &mut resource);
    resource.extend(scope);
    prost::encoding::encode_varint(resource.len() as u64, &mut body);
    body.extend(resource);
    check("empty spans", false, true, &body);
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

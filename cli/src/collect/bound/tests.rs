//! The bound is at least what the decoded request holds (as [`crate::collect::size`]
//! measures it), for honest requests close to it, for hostile ones as large as what
//! decoding them would take, and never refuses what prost decodes.

use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{
    any_value, AnyValue, ArrayValue, EntityRef, InstrumentationScope, KeyValue, KeyValueList,
};
use opentelemetry_proto::tonic::metrics::v1::{
    exemplar, exponential_histogram_data_point, metric, number_data_point, summary_data_point,
    Exemplar, ExponentialHistogram, ExponentialHistogramDataPoint, Gauge, Histogram,
    HistogramDataPoint, Metric, NumberDataPoint, ResourceMetrics, ScopeMetrics, Sum, Summary,
    SummaryDataPoint,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{span, ResourceSpans, ScopeSpans, Span, Status};

use super::schema::{self, Kind};
use super::*;
use crate::collect::decode;
use crate::collect::size;

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
        kv("ok", any_value::Value::BoolValue(true)),
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
        status: Some(Status {
            message: String::new(),
            code: 1,
        }),
        ..Default::default()
    }
}

/// Every field the bound reads, with nested values and every kind of attribute.
fn rich_span(i: u64) -> Span {
    let nested = AnyValue {
        value: Some(any_value::Value::ArrayValue(ArrayValue {
            values: vec![
                AnyValue {
                    value: Some(any_value::Value::StringValue("a\"quoted\" value".into())),
                },
                AnyValue {
                    value: Some(any_value::Value::KvlistValue(KeyValueList {
                        values: attributes(i),
                    })),
                },
                AnyValue {
                    value: Some(any_value::Value::BytesValue(vec![1, 2, 3, 4, 5])),
                },
            ],
        })),
    };
    let mut span = sdk_span(i);
    span.trace_state = "vendor=1".into();
    span.attributes.push(KeyValue {
        key: "nested".into(),
        value: Some(nested),
        ..Default::default()
    });
    span.events = vec![span::Event {
        name: "checkpoint".into(),
        attributes: attributes(i),
        ..Default::default()
    }];
    span.links = vec![span::Link {
        trace_id: vec![3; 16],
        span_id: vec![4; 8],
        trace_state: "x=y".into(),
        attributes: attributes(i),
        ..Default::default()
    }];
    span.status = Some(Status {
        message: "failed: out of memory".into(),
        code: 2,
    });
    span
}

fn traces_of(spans: Vec<Span>) -> ExportTraceServiceRequest {
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource: Some(Resource {
                attributes: attributes(0),
                entity_refs: vec![EntityRef {
                    schema_url: "https://opentelemetry.io/schemas/1.0".into(),
                    r#type: "service".into(),
                    id_keys: vec!["service.name".into(), "service.instance.id".into()],
                    description_keys: vec!["service.version".into()],
                }],
                ..Default::default()
            }),
            scope_spans: vec![ScopeSpans {
                scope: Some(InstrumentationScope {
                    name: "train".into(),
                    version: "1.0".into(),
                    attributes: attributes(1),
                    ..Default::default()
                }),
                spans,
                schema_url: "https://opentelemetry.io/schemas/1.0".into(),
            }],
            schema_url: String::new(),
        }],
    }
}

fn every_metric() -> ExportMetricsServiceRequest {
    let number = |i: u64| NumberDataPoint {
        attributes: attributes(i),
        time_unix_nano: 1_700_000_000_000_000_000,
        exemplars: vec![Exemplar {
            filtered_attributes: attributes(i),
            span_id: vec![1; 8],
            trace_id: vec![2; 16],
            value: Some(exemplar::Value::AsInt(3)),
            ..Default::default()
        }],
        value: Some(number_data_point::Value::AsDouble(1.5)),
        ..Default::default()
    };
    let metric = |name: &str, data: metric::Data| Metric {
        name: name.into(),
        description: "a figure".into(),
        unit: "By".into(),
        metadata: attributes(9),
        data: Some(data),
    };
    let metrics = vec![
        metric(
            "gauge",
            metric::Data::Gauge(Gauge {
                data_points: (0..20).map(number).collect(),
            }),
        ),
        metric(
            "sum",
            metric::Data::Sum(Sum {
                data_points: (0..5).map(number).collect(),
                aggregation_temporality: 2,
                is_monotonic: true,
            }),
        ),
        metric(
            "histogram",
            metric::Data::Histogram(Histogram {
                data_points: vec![HistogramDataPoint {
                    attributes: attributes(1),
                    bucket_counts: vec![1, 2, 3, 4, 5, 6, 7],
                    explicit_bounds: vec![1.0, 2.0, 4.0, 8.0, 16.0, 32.0],
                    sum: Some(12.0),
                    ..Default::default()
                }],
                aggregation_temporality: 1,
            }),
        ),
        metric(
            "exponential",
            metric::Data::ExponentialHistogram(ExponentialHistogram {
                data_points: vec![ExponentialHistogramDataPoint {
                    attributes: attributes(2),
                    positive: Some(exponential_histogram_data_point::Buckets {
                        offset: 1,
                        bucket_counts: vec![1, 300, 70000, 9],
                    }),
                    negative: Some(exponential_histogram_data_point::Buckets {
                        offset: -1,
                        bucket_counts: vec![5],
                    }),
                    ..Default::default()
                }],
                aggregation_temporality: 1,
            }),
        ),
        metric(
            "summary",
            metric::Data::Summary(Summary {
                data_points: vec![SummaryDataPoint {
                    attributes: attributes(3),
                    quantile_values: vec![
                        summary_data_point::ValueAtQuantile {
                            quantile: 0.5,
                            value: 1.0,
                        };
                        3
                    ],
                    ..Default::default()
                }],
            }),
        ),
    ];
    ExportMetricsServiceRequest {
        resource_metrics: vec![ResourceMetrics {
            resource: Some(Resource {
                attributes: attributes(0),
                ..Default::default()
            }),
            scope_metrics: vec![ScopeMetrics {
                scope: Some(InstrumentationScope {
                    name: "meter".into(),
                    ..Default::default()
                }),
                metrics,
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

/// The whole bound, with no cap.
fn uncapped(foreseen: Result<Foreseen, Rejection>) -> Result<usize, Rejection> {
    foreseen.map(|f| match f {
        Foreseen::AtMost(bytes) => bytes,
        Foreseen::Over(bytes) => panic!("over no cap at {bytes}"),
    })
}

fn bound_traces(format: Format, body: &[u8]) -> Result<usize, Rejection> {
    uncapped(traces(format, body, usize::MAX))
}

fn bound_metrics(format: Format, body: &[u8]) -> Result<usize, Rejection> {
    uncapped(metrics(format, body, usize::MAX))
}

/// The bound of `body` against the measure of its decoded request, both formats' way.
fn check_traces(what: &str, format: Format, body: &[u8]) -> (usize, usize) {
    let bound = bound_traces(format, body).unwrap_or_else(|r| panic!("{what}: {r:?}"));
    let decoded = decode::traces(format, body).unwrap_or_else(|r| panic!("{what}: {r:?}"));
    let measured = size::traces(&decoded);
    assert!(
        bound >= measured,
        "{what}: bound {bound} < {measured} measured"
    );
    (bound, measured)
}

fn check_metrics(what: &str, format: Format, body: &[u8]) -> (usize, usize) {
    let bound = bound_metrics(format, body).unwrap_or_else(|r| panic!("{what}: {r:?}"));
    let decoded = decode::metrics(format, body).unwrap_or_else(|r| panic!("{what}: {r:?}"));
    let measured = size::metrics(&decoded);
    assert!(
        bound >= measured,
        "{what}: bound {bound} < {measured} measured"
    );
    (bound, measured)
}

/// For honest protobuf requests the bound is what decoding holds, within a few percent, so
/// that a request that fits is not refused.
#[test]
fn honest_protobuf_requests_are_bounded_tightly() {
    let cases = [
        ("SDK spans", traces_of((0..5000).map(sdk_span).collect())),
        ("rich spans", traces_of((0..700).map(rich_span).collect())),
        ("one span", traces_of(vec![sdk_span(1)])),
        ("empty", ExportTraceServiceRequest::default()),
    ];
    for (what, request) in cases {
        let body = prost::Message::encode_to_vec(&request);
        let (bound, measured) = check_traces(what, Format::Protobuf, &body);
        assert!(
            bound <= measured + measured / 50,
            "{what}: bound {bound} far over {measured} measured"
        );
    }
    let body = prost::Message::encode_to_vec(&every_metric());
    let (bound, measured) = check_metrics("every metric", Format::Protobuf, &body);
    assert!(bound <= measured + measured / 50, "{bound} vs {measured}");
}

/// JSON: at least what decoding holds, and for spans not wildly more.
#[test]
fn honest_json_requests_are_bounded() {
    for (what, request) in [
        ("SDK spans", traces_of((0..2000).map(sdk_span).collect())),
        ("rich spans", traces_of((0..300).map(rich_span).collect())),
    ] {
        let body = serde_json::to_vec(&request).unwrap();
        let (bound, measured) = check_traces(what, Format::Json, &body);
        assert!(bound <= 3 * measured, "{what}: bound {bound} vs {measured}");
    }
    // A metric's data points are read through serde's generic tree (`Metric` flattens its
    // `oneof`), several times the size of the decoded points while the metric is read.
    let body = serde_json::to_vec(&every_metric()).unwrap();
    let (bound, measured) = check_metrics("every metric", Format::Json, &body);
    assert!(bound <= 16 * measured, "{bound} vs {measured}");
}

fn varint(mut value: usize, out: &mut Vec<u8>) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

fn field(tag: u8, content: &[u8]) -> Vec<u8> {
    let mut out = vec![(tag << 3) | 2];
    varint(content.len(), &mut out);
    out.extend_from_slice(content);
    out
}

/// Empty spans: 2 bytes each on the wire, a whole `Span` decoded.
#[test]
fn empty_spans_count_as_decoded_spans() {
    let spans = 100_000;
    let body = field(1, &field(2, &[0x12, 0x00].repeat(spans)));
    let (bound, measured) = check_traces("empty spans", Format::Protobuf, &body);
    assert!(bound >= spans * std::mem::size_of::<Span>());
    assert!(bound <= measured + measured / 50, "{bound} vs {measured}");
    assert!(bound > 100 * body.len());

    let json = format!(
        "{{\"resourceSpans\":[{{\"scopeSpans\":[{{\"spans\":[{}{{}}]}}]}}]}}",
        "{},".repeat(spans - 1)
    );
    let (bound, _) = check_traces("empty JSON spans", Format::Json, json.as_bytes());
    assert!(bound >= spans * std::mem::size_of::<Span>());
}

/// A single field given several times is merged by prost: a resource's attributes across
/// its repeats, a span's name replaced, an `arrayValue` merged; the bound holds whatever
/// the split.
#[test]
fn repeated_single_fields_are_bounded_as_prost_merges_them() {
    let attribute = prost::Message::encode_to_vec(&kv("k", any_value::Value::IntValue(1)));
    for split in [1usize, 2, 3, 5, 8, 9, 17, 33] {
        // `resource` 3 times, with `split`, 1 and `split` attributes.
        let attrs = |n: usize| field(1, &attribute).repeat(n);
        let mut resource_spans = Vec::new();
        for n in [split, 1, split] {
            resource_spans.extend(field(1, &attrs(n)));
        }
        // A span whose name is given 3 times, growing, and whose attribute's value is
        // given twice as an array.
        let array = |n: usize| {
            let value = prost::Message::encode_to_vec(&AnyValue {
                value: Some(any_value::Value::IntValue(7)),
            });
            field(5, &field(1, &value).repeat(n))
        };
        let mut value = array(split);
        value.extend(array(1));
        let mut attribute = field(1, b"nested");
        attribute.extend(field(2, &value));
        let mut span = Vec::new();
        for len in [3, 40, 200] {
            span.extend(field(5, &vec![b'x'; len * split]));
        }
        span.extend(field(9, &attribute));
        span.extend(field(9, &attribute));
        resource_spans.extend(field(2, &field(2, &span)));
        let body = field(1, &resource_spans);
        check_traces(&format!("split {split}"), Format::Protobuf, &body);
    }
}

/// Nested `AnyValue`s in JSON are copied once per level by serde: a deep chain of arrays
/// over many values is bounded by what those copies take, far above its decoded size.
#[test]
fn nested_json_values_count_each_copy() {
    let mut value = format!(
        "{{\"arrayValue\":{{\"values\":[{}{{}}]}}}}",
        "{},".repeat(500)
    );
    for _ in 0..20 {
        value = format!("{{\"arrayValue\":{{\"values\":[{value}]}}}}");
    }
    let body = format!(
        "{{\"resourceSpans\":[{{\"scopeSpans\":[{{\"spans\":[{{\"attributes\":[{{\"key\":\"a\",\
         \"value\":{value}}}]}}]}}]}}]}}"
    );
    let (bound, measured) = check_traces("nested", Format::Json, body.as_bytes());
    assert!(bound > 10 * measured, "{bound} vs {measured}");
}

/// OTLP/JSON messages are objects: serde would also read one from an array, by position;
/// the bound refuses that.
#[test]
fn a_message_given_as_an_array_is_refused() {
    let body = br#"{"resourceSpans":[[null,[]]]}"#;
    let refused = bound_traces(Format::Json, body).unwrap_err();
    assert_eq!(refused.status, 400);
    assert!(refused.message.contains("array"), "{}", refused.message);
}

/// Truncations and corruptions: the bound never panics, answers 400 for what it cannot
/// read, and whenever prost decodes a body the bound reads it too, at least as large.
#[test]
fn corrupted_bodies_never_panic_and_what_decodes_is_bounded() {
    let request = traces_of((0..3).map(rich_span).collect());
    let bytes = prost::Message::encode_to_vec(&request);
    let json = serde_json::to_vec(&request).unwrap();
    let metrics_bytes = prost::Message::encode_to_vec(&every_metric());
    let mut seed = 0x2545_F491_4F6C_DD1Du64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let mut checked = 0;
    for (format, body) in [(Format::Protobuf, &bytes), (Format::Json, &json)] {
        let mut bodies: Vec<Vec<u8>> = (0..body.len()).map(|cut| body[..cut].to_vec()).collect();
        for _ in 0..3000 {
            let mut noisy = body.clone();
            for _ in 0..1 + next() % 4 {
                let i = (next() as usize) % noisy.len();
                noisy[i] = next() as u8;
            }
            bodies.push(noisy);
        }
        for body in &bodies {
            let foreseen = bound_traces(format, body);
            if let Err(r) = &foreseen {
                assert_eq!(r.status, 400);
            }
            if let Ok(decoded) = decode::traces(format, body) {
                let foreseen = foreseen.unwrap_or_else(|r| {
                    panic!("{format:?}: prost decodes what the bound refuses: {r:?}")
                });
                assert!(foreseen >= size::traces(&decoded));
                checked += 1;
            }
        }
    }
    for _ in 0..3000 {
        let mut noisy = metrics_bytes.clone();
        for _ in 0..1 + next() % 4 {
            let i = (next() as usize) % noisy.len();
            noisy[i] = next() as u8;
        }
        if let Ok(decoded) = decode::metrics(Format::Protobuf, &noisy) {
            let foreseen = bound_metrics(Format::Protobuf, &noisy).expect("what prost decodes");
            assert!(foreseen >= size::metrics(&decoded));
            checked += 1;
        }
    }
    assert!(checked > 500, "only {checked} bodies decoded");
}

/// Every message the bound reads fits its per-message counts.
#[test]
fn every_message_fits_the_counts() {
    let mut seen: Vec<*const schema::Message> = Vec::new();
    let mut todo = vec![&schema::TRACES, &schema::METRICS];
    while let Some(message) = todo.pop() {
        if seen.contains(&(message as *const _)) {
            continue;
        }
        seen.push(message);
        assert!(message.fields.len() <= schema::MAX_FIELDS);
        for field in message.fields {
            if let Kind::Message(m) | Kind::Messages(m) = field.kind {
                todo.push(m);
            }
        }
    }
    assert!(seen.len() > 25, "{} messages", seen.len());
}

/// A walk given a cap stops once over it: 16 MiB of empty spans, 2 GiB decoded, are found
/// over a 256 MiB cap in either format, before the rest is read.
#[test]
fn a_walk_stops_over_its_cap() {
    let cap = 256 << 20;
    let spans = (16 << 20) / 2 - 8;
    let body = field(1, &field(2, &[0x12, 0x00].repeat(spans)));
    match traces(Format::Protobuf, &body, cap) {
        Ok(Foreseen::Over(bytes)) => assert!(bytes > cap),
        other => panic!("{other:?}"),
    }
    let json = format!(
        "{{\"resourceSpans\":[{{\"scopeSpans\":[{{\"spans\":[{}{{}}]}}]}}]}}",
        "{},".repeat(spans / 2)
    );
    match traces(Format::Json, json.as_bytes(), cap) {
        Ok(Foreseen::Over(bytes)) => assert!(bytes > cap),
        other => panic!("{other:?}"),
    }
    // Under the cap, the whole figure.
    let small = field(1, &field(2, &[0x12, 0x00].repeat(1000)));
    assert!(matches!(
        traces(Format::Protobuf, &small, cap),
        Ok(Foreseen::AtMost(_))
    ));
}

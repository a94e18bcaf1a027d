//! The bound is at least what the decoded request holds (as [`crate::collect::size`]
//! measures it), for honest requests close to it, for hostile ones as large as what
//! decoding them would take, and never refuses what prost decodes.

mod honest;
mod hostile;
mod limits;

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

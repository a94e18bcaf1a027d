//! Recorded requests flattened into one value per span or data point.

use std::fmt::Write as _;

use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, KeyValue};
use opentelemetry_proto::tonic::metrics::v1::{metric, number_data_point};
use opentelemetry_proto::tonic::trace::v1::Span;

use super::*;

pub(super) fn flatten_spans(requests: &[ExportTraceServiceRequest]) -> Vec<ReceivedSpan> {
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

pub(super) fn flatten_points(requests: &[ExportMetricsServiceRequest]) -> Vec<ReceivedPoint> {
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

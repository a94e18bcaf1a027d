//! OTLP trace requests built for the collector's tests: attributes, requests of one resource
//! and one scope, and hostile protobuf bodies written byte by byte.

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span, Status};

/// An attribute `key` holding `value`.
pub fn kv(key: &str, value: any_value::Value) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue { value: Some(value) }),
        ..Default::default()
    }
}

/// The `i`th `step` span as an OpenTelemetry SDK sends it: ids, a parent, a kind, times and
/// an `ok` status; attributes and events are the caller's (`Span { attributes, ..sdk_span(i) }`).
pub fn sdk_span(i: u64) -> Span {
    Span {
        trace_id: vec![7; 16],
        span_id: (i + 1).to_be_bytes().to_vec(),
        parent_span_id: vec![9; 8],
        name: "step".into(),
        kind: 1,
        start_time_unix_nano: 1_700_000_000_000_000_000 + i,
        end_time_unix_nano: 1_700_000_000_000_100_000 + i,
        status: Some(Status {
            message: "ok".into(),
            code: 1,
        }),
        ..Default::default()
    }
}

/// A request of `spans` under one resource (without attributes) and one scope.
pub fn traces(spans: Vec<Span>) -> ExportTraceServiceRequest {
    in_resource(None, spans)
}

/// A request of `spans` under one scope of a resource whose `service.name` is `service`, as
/// an instrumented program sends them.
pub fn service_traces(service: &str, spans: Vec<Span>) -> ExportTraceServiceRequest {
    let resource = Resource {
        attributes: vec![kv(
            "service.name",
            any_value::Value::StringValue(service.into()),
        )],
        ..Default::default()
    };
    in_resource(Some(resource), spans)
}

fn in_resource(resource: Option<Resource>, spans: Vec<Span>) -> ExportTraceServiceRequest {
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            resource,
            scope_spans: vec![ScopeSpans {
                spans,
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

/// Appends `value` as a protobuf varint.
pub fn varint(mut value: usize, out: &mut Vec<u8>) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// Field `tag` of a message, length-delimited.
pub fn field(tag: u8, content: &[u8]) -> Vec<u8> {
    let mut out = vec![(tag << 3) | 2];
    varint(content.len(), &mut out);
    out.extend_from_slice(content);
    out
}

/// The `ResourceSpans` (field 2 of the request's field 1) of a request of `spans` empty
/// spans: one `ScopeSpans` (its field 2) of spans that are `0x12 0x00` each, two bytes on
/// the wire that decode to a whole `Span`. The same bytes read as metrics are empty
/// `Metric`s in the same nesting.
pub fn empty_spans_resource(spans: usize) -> Vec<u8> {
    field(2, &[0x12u8, 0x00].repeat(spans))
}

/// A request of `spans` empty spans (see [`empty_spans_resource`]).
pub fn empty_spans_request(spans: usize) -> Vec<u8> {
    field(1, &empty_spans_resource(spans))
}

//! What collect's unit tests share: OTLP requests of step spans, as an instrumented
//! program sends them. Test code only.

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};

/// A `step` span with fixed ids and nothing else.
pub(crate) fn step_span() -> Span {
    Span {
        trace_id: vec![1; 16],
        span_id: vec![2; 8],
        name: "step".into(),
        ..Default::default()
    }
}

/// A request with `spans` under one resource and one scope.
pub(crate) fn request_of(spans: Vec<Span>) -> ExportTraceServiceRequest {
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

//! OTLP/JSON lines: one export request per line, as the OpenTelemetry Collector's file
//! exporter writes them. Used for the run directory and for the `console` exporter.

mod span_json;

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

use opentelemetry::InstrumentationScope;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::transform::common::tonic::ResourceAttributesWithSchema;
use opentelemetry_proto::transform::trace::tonic::group_spans_by_resource_and_scope;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::metrics::data::ResourceMetrics;
use opentelemetry_sdk::metrics::exporter::PushMetricExporter;
use opentelemetry_sdk::metrics::Temporality;
use opentelemetry_sdk::trace::{SpanData, SpanExporter};
use opentelemetry_sdk::Resource;

/// A line-oriented sink: a file in the run directory, or standard output.
pub(crate) struct Lines(Mutex<Box<dyn Write + Send>>);

impl std::fmt::Debug for Lines {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Lines")
    }
}

impl Lines {
    /// Appends to `path`, creating it.
    pub(crate) fn file(path: &Path) -> io::Result<Self> {
        let file: File = OpenOptions::new().create(true).append(true).open(path)?;
        Ok(Self(Mutex::new(Box::new(BufWriter::new(file)))))
    }

    pub(crate) fn stdout() -> Self {
        Self(Mutex::new(Box::new(io::stdout())))
    }

    /// Writes `line` and a newline, and flushes.
    fn write_line(&self, line: &[u8]) -> OTelSdkResult {
        let mut out = self
            .0
            .lock()
            .map_err(|_| OTelSdkError::InternalFailure("output lock poisoned".into()))?;
        let failed = |e: &dyn std::fmt::Display| OTelSdkError::InternalFailure(e.to_string());
        out.write_all(line).map_err(|e| failed(&e))?;
        out.write_all(b"\n").map_err(|e| failed(&e))?;
        out.flush().map_err(|e| failed(&e))
    }

    fn write_json(&self, value: &impl serde::Serialize) -> OTelSdkResult {
        let mut out = self
            .0
            .lock()
            .map_err(|_| OTelSdkError::InternalFailure("output lock poisoned".into()))?;
        let failed = |e: &dyn std::fmt::Display| OTelSdkError::InternalFailure(e.to_string());
        serde_json::to_writer(&mut *out, value).map_err(|e| failed(&e))?;
        out.write_all(b"\n").map_err(|e| failed(&e))?;
        out.flush().map_err(|e| failed(&e))
    }
}

/// Writes each batch of spans as one `ExportTraceServiceRequest` line.
#[derive(Debug)]
pub(crate) struct JsonlSpanExporter {
    lines: Lines,
    resource: ResourceAttributesWithSchema,
    /// Per instrumentation scope, the JSON around its spans.
    envelopes: Mutex<HashMap<InstrumentationScope, Envelope>>,
}

/// A `ResourceSpans` object with one scope, split where its spans go.
#[derive(Debug)]
struct Envelope {
    before: String,
    after: String,
}

impl JsonlSpanExporter {
    pub(crate) fn new(lines: Lines, resource: &Resource) -> Self {
        Self {
            lines,
            resource: resource.into(),
            envelopes: Mutex::new(HashMap::new()),
        }
    }

    /// The resource and scope of `span`, as `opentelemetry-proto` writes them.
    fn envelope(&self, span: &SpanData) -> io::Result<Envelope> {
        let mut bare = span.clone();
        bare.attributes.clear();
        bare.events = Default::default();
        bare.links = Default::default();
        let mut resource_spans = group_spans_by_resource_and_scope(vec![bare], &self.resource);
        for scope_spans in resource_spans.iter_mut().flat_map(|r| &mut r.scope_spans) {
            scope_spans.spans.clear();
        }
        let json = serde_json::to_string(&resource_spans.pop().unwrap_or_default())?;
        const SPANS: &str = "\"spans\":[]";
        let at = json
            .find(SPANS)
            .ok_or_else(|| io::Error::other("no spans field in the OTLP/JSON envelope"))?;
        Ok(Envelope {
            before: json[..at + SPANS.len() - 1].to_owned(),
            after: json[at + SPANS.len() - 1..].to_owned(),
        })
    }

    fn encode(&self, batch: &[SpanData]) -> io::Result<Vec<u8>> {
        let mut envelopes = self
            .envelopes
            .lock()
            .map_err(|_| io::Error::other("envelope cache poisoned"))?;
        // Spans of one scope together, scopes in order of first appearance.
        let mut scopes: Vec<&InstrumentationScope> = Vec::new();
        for span in batch {
            if !scopes.contains(&&span.instrumentation_scope) {
                scopes.push(&span.instrumentation_scope);
            }
        }
        let mut out = Vec::with_capacity(batch.len() * 900 + 256);
        out.extend_from_slice(b"{\"resourceSpans\":[");
        for (i, scope) in scopes.into_iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            if !envelopes.contains_key(scope) {
                let first = batch
                    .iter()
                    .find(|s| &s.instrumentation_scope == scope)
                    .ok_or_else(|| io::Error::other("scope without spans"))?;
                envelopes.insert(scope.clone(), self.envelope(first)?);
            }
            let envelope = &envelopes[scope];
            out.extend_from_slice(envelope.before.as_bytes());
            let mut first = true;
            for span in batch.iter().filter(|s| &s.instrumentation_scope == scope) {
                if !first {
                    out.push(b',');
                }
                first = false;
                span_json::write_span(&mut out, span)?;
            }
            out.extend_from_slice(envelope.after.as_bytes());
        }
        out.extend_from_slice(b"]}");
        Ok(out)
    }
}

impl SpanExporter for JsonlSpanExporter {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let line = self
            .encode(&batch)
            .map_err(|e| OTelSdkError::InternalFailure(e.to_string()))?;
        self.lines.write_line(&line)
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.resource = resource.into();
        if let Ok(envelopes) = self.envelopes.get_mut() {
            envelopes.clear();
        }
    }
}

/// Discards spans: `OTEL_TRACES_EXPORTER=none`, where spans still feed the taps (the
/// duration histograms, diagnosis) but go nowhere.
#[derive(Debug)]
pub(crate) struct NullSpanExporter;

impl SpanExporter for NullSpanExporter {
    async fn export(&self, _batch: Vec<SpanData>) -> OTelSdkResult {
        Ok(())
    }
}

/// Writes each collection as one `ExportMetricsServiceRequest` line.
#[derive(Debug)]
pub(crate) struct JsonlMetricExporter {
    lines: Lines,
}

impl JsonlMetricExporter {
    pub(crate) fn new(lines: Lines) -> Self {
        Self { lines }
    }
}

impl PushMetricExporter for JsonlMetricExporter {
    async fn export(&self, metrics: &ResourceMetrics) -> OTelSdkResult {
        let request = ExportMetricsServiceRequest::from(metrics);
        self.lines.write_json(&request)
    }

    fn force_flush(&self) -> OTelSdkResult {
        Ok(())
    }

    fn shutdown_with_timeout(&self, _timeout: Duration) -> OTelSdkResult {
        Ok(())
    }

    fn temporality(&self) -> Temporality {
        Temporality::Cumulative
    }
}

#[cfg(test)]
mod tests {
    use std::borrow::Cow;
    use std::time::{Duration, SystemTime};

    use opentelemetry::trace::{
        Event, Link, SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId, TraceState,
    };
    use opentelemetry::{InstrumentationScope, KeyValue, Value};
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use opentelemetry_proto::transform::trace::tonic::group_spans_by_resource_and_scope;
    use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanLinks};
    use opentelemetry_sdk::Resource;

    use super::{JsonlSpanExporter, Lines};

    fn span(i: u64, parent: bool) -> SpanData {
        let context = SpanContext::new(
            TraceId::from(0x1234_5678_9abc_def0_u128 + u128::from(i)),
            SpanId::from(0xfeed_0000_0000_0000_u64 + i),
            TraceFlags::SAMPLED,
            false,
            TraceState::from_key_value([("vendor", "x1")]).unwrap(),
        );
        let start = SystemTime::UNIX_EPOCH + Duration::from_nanos(1_796_000_000_123_456_789 + i);
        let mut events = SpanEvents::default();
        events.events.push(Event::new(
            "gpu.memory.budget_exceeded",
            start + Duration::from_millis(1),
            vec![KeyValue::new("budget", 42_i64), KeyValue::new("ratio", 0.5)],
            1,
        ));
        let mut links = SpanLinks::default();
        if i % 2 == 0 {
            links.links.push(Link::with_context(context.clone()));
        }
        SpanData {
            span_context: context,
            parent_span_id: if parent {
                SpanId::from(7)
            } else {
                SpanId::INVALID
            },
            parent_span_is_remote: i % 3 == 0,
            span_kind: if i % 2 == 0 {
                SpanKind::Internal
            } else {
                SpanKind::Client
            },
            name: Cow::Owned(format!("step \"{i}\"\n")),
            start_time: start,
            end_time: start + Duration::from_millis(5),
            attributes: vec![
                KeyValue::new("gpu.memory.peak", i64::MAX),
                KeyValue::new("gpu.memory.source", "nvml"),
                KeyValue::new("gpu.memory.imbalance", 0.125),
                KeyValue::new("flag", true),
                KeyValue::new("weird", f64::NAN),
                KeyValue::new(
                    "sizes",
                    Value::Array(opentelemetry::Array::I64(vec![1, 2, 3])),
                ),
                KeyValue::new("unicode é \u{1}", "tab\there"),
            ],
            dropped_attributes_count: 2,
            events,
            links,
            status: match i % 3 {
                0 => Status::Unset,
                1 => Status::Ok,
                _ => Status::error("gpu 1: GPU is lost"),
            },
            instrumentation_scope: InstrumentationScope::builder("gpuspan")
                .with_version("1.2")
                .build(),
        }
    }

    #[test]
    fn direct_json_is_the_document_the_proto_path_writes() {
        let resource = Resource::builder_empty()
            .with_service_name("test")
            .with_attribute(KeyValue::new("ml.run.id", "r1"))
            .build();
        let exporter = JsonlSpanExporter::new(Lines::stdout(), &resource);
        let batch: Vec<SpanData> = (0..6).map(|i| span(i, i % 2 == 1)).collect();
        let direct: serde_json::Value =
            serde_json::from_slice(&exporter.encode(&batch).unwrap()).unwrap();
        let proto = ExportTraceServiceRequest {
            resource_spans: group_spans_by_resource_and_scope(batch.clone(), &(&resource).into()),
        };
        let expected = serde_json::to_value(&proto).unwrap();
        assert_eq!(direct, expected);
        // And it reads back as the same request.
        let read: ExportTraceServiceRequest = serde_json::from_value(direct).unwrap();
        assert_eq!(read.resource_spans[0].scope_spans[0].spans.len(), 6);
    }
}

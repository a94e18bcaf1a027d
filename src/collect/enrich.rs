//! Puts GPU memory on received spans: each span's own start and end time looked up in the
//! collector's timelines, with the same attribute names the Rust macros record.

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue};
use opentelemetry_proto::tonic::trace::v1::Span;

use crate::figures::{device_keys, Number, SpanFigures, Triple, TRACED};
use crate::names::attribute as attr;
use crate::record::GpuId;
use crate::timeline::store::WindowMax;

use super::timeline::Timelines;

/// What enrichment did to a batch.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Enriched {
    /// Spans given memory figures.
    pub(crate) enriched: u64,
    /// Spans that already carried `gpu.memory.*` and passed unchanged.
    pub(crate) passed: u64,
    /// Spans the timeline knows nothing about (they ended before it began).
    pub(crate) unknown: u64,
}

/// Attribute keys made once.
#[derive(Debug)]
pub(crate) struct Enricher {
    source: String,
    /// `gpu.<i>.memory.start` / `.end` / `.peak` per device, with several devices.
    device_keys: Vec<[String; 3]>,
}

/// A figure as an OTLP attribute.
fn key_value(key: &str, value: Value) -> KeyValue {
    KeyValue {
        key: key.to_owned(),
        value: Some(AnyValue { value: Some(value) }),
        ..Default::default()
    }
}

fn number(value: Number) -> Value {
    match value {
        Number::Int(v) => Value::IntValue(v),
        Number::Float(v) => Value::DoubleValue(v),
    }
}

/// Start, end and peak of series `i` of a window, each where known.
fn triple(window: &WindowMax, i: usize) -> Triple {
    Triple::new(
        window.start.as_ref().and_then(|s| s[i]),
        window.end.as_ref().and_then(|s| s[i]),
        window.peak[i],
    )
}

/// An integer attribute, also when sent as a string or double (some SDKs do).
pub(crate) fn int_attribute(attributes: &[KeyValue], key: &str) -> Option<i64> {
    let value = attributes.iter().find(|kv| kv.key == key)?.value.as_ref()?;
    match value.value.as_ref()? {
        Value::IntValue(v) => Some(*v),
        Value::StringValue(s) => s.parse().ok(),
        Value::DoubleValue(d) if d.fract() == 0.0 => Some(*d as i64),
        _ => None,
    }
}

impl Enricher {
    pub(crate) fn new(source: &str, device_ids: &[GpuId]) -> Self {
        let device_keys = if device_ids.len() > 1 {
            device_ids.iter().map(|&id| device_keys(id)).collect()
        } else {
            Vec::new()
        };
        Self {
            source: source.to_owned(),
            device_keys,
        }
    }

    /// Enriches every span of a request in place.
    pub(crate) fn request(
        &self,
        request: &mut ExportTraceServiceRequest,
        timelines: &Timelines,
    ) -> Enriched {
        let mut counts = Enriched::default();
        for resource_spans in &mut request.resource_spans {
            let pid = resource_spans
                .resource
                .as_ref()
                .and_then(|r| int_attribute(&r.attributes, attr::PROCESS_PID))
                .and_then(|p| u32::try_from(p).ok());
            for scope in &mut resource_spans.scope_spans {
                for span in &mut scope.spans {
                    self.span(span, pid, timelines, &mut counts);
                }
            }
        }
        counts
    }

    /// Enriches one span; `pid` is its resource's `process.pid`.
    pub(crate) fn span(
        &self,
        span: &mut Span,
        pid: Option<u32>,
        timelines: &Timelines,
        counts: &mut Enriched,
    ) {
        if span
            .attributes
            .iter()
            .any(|kv| kv.key.starts_with(attr::GPU_MEMORY_PREFIX))
        {
            counts.passed += 1;
            return;
        }
        if timelines.device_ids.is_empty() {
            counts.unknown += 1;
            return;
        }
        let (start, end) = (span.start_time_unix_nano, span.end_time_unix_nano);
        let Some(window) = timelines.devices_window(start, end) else {
            counts.unknown += 1;
            return;
        };
        counts.enriched += 1;
        // The figures the macros would have measured, from the timeline's window.
        let n = timelines.device_ids.len();
        let process = pid.and_then(|pid| timelines.process_window(pid, start, end));
        // The process lists may run slower than the ticks that record them.
        let process_resolution = process
            .as_ref()
            .map(|window| timelines.process_resolution_ns(window.resolution_ns));
        let figures = SpanFigures {
            gpu: triple(&window, n),
            devices: if n > 1 {
                (0..n).map(|i| triple(&window, i)).collect()
            } else {
                Vec::new()
            },
            process_gpu: process
                .as_ref()
                .map(|process| triple(process, 0))
                .unwrap_or_default(),
            samples: window.samples,
            resolution_ns: Some(window.resolution_ns),
            process_resolution_ns: process_resolution,
            ..SpanFigures::default()
        };
        let out = &mut span.attributes;
        out.reserve(TRACED.len() + 3 + 3 * self.device_keys.len());
        out.extend(
            figures
                .numbers()
                .map(|(key, value)| key_value(key, number(value))),
        );
        out.push(key_value(
            attr::GPU_MEMORY_SOURCE,
            Value::StringValue(self.source.clone()),
        ));
        for (device, figure, value) in figures.device_numbers() {
            if let Some(keys) = self.device_keys.get(device) {
                out.push(key_value(&keys[figure], Value::IntValue(value)));
            }
        }
    }
}

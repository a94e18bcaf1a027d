//! Puts GPU memory on received spans: each span's own start and end time looked up in the
//! collector's timelines, with the same attribute names the Rust macros record.

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue};
use opentelemetry_proto::tonic::trace::v1::Span;

use crate::timeline::store::WindowMax;

use super::timeline::Timelines;

/// Attribute naming the width, in nanoseconds, that the memory figures stand for.
pub const RESOLUTION_ATTRIBUTE: &str = "gpu.memory.resolution";

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

fn int(key: &str, value: u64) -> KeyValue {
    KeyValue {
        key: key.to_owned(),
        value: Some(AnyValue {
            value: Some(Value::IntValue(i64::try_from(value).unwrap_or(i64::MAX))),
        }),
        ..Default::default()
    }
}

fn delta(key: &str, start: u64, end: u64) -> KeyValue {
    KeyValue {
        key: key.to_owned(),
        value: Some(AnyValue {
            value: Some(Value::IntValue((end as i128 - start as i128) as i64)),
        }),
        ..Default::default()
    }
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
    pub(crate) fn new(source: &str, device_indexes: &[u32]) -> Self {
        let device_keys = if device_indexes.len() > 1 {
            device_indexes
                .iter()
                .map(|i| ["start", "end", "peak"].map(|e| format!("gpu.{i}.memory.{e}")))
                .collect()
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
                .and_then(|r| int_attribute(&r.attributes, "process.pid"))
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
            .any(|kv| kv.key.starts_with("gpu.memory."))
        {
            counts.passed += 1;
            return;
        }
        if timelines.device_indexes.is_empty() {
            counts.unknown += 1;
            return;
        }
        let (start, end) = (span.start_time_unix_nano, span.end_time_unix_nano);
        let Some(window) = timelines.devices_window(start, end) else {
            counts.unknown += 1;
            return;
        };
        counts.enriched += 1;
        let out = &mut span.attributes;
        let n = timelines.device_indexes.len();
        // Every figure of every device, plus the sums and the process: one allocation.
        out.reserve(3 * self.device_keys.len() + 12);
        if n > 0 {
            self.figures(
                out,
                &window,
                n,
                ["gpu.memory.start", "gpu.memory.end", "gpu.memory.peak"],
            );
            if let (Some(Some(s)), Some(Some(e))) = (
                window.start.as_ref().map(|v| v[n]),
                window.end.as_ref().map(|v| v[n]),
            ) {
                out.push(delta("gpu.memory.delta", s, e));
            }
            for (i, keys) in self.device_keys.iter().enumerate() {
                let keys = [keys[0].as_str(), keys[1].as_str(), keys[2].as_str()];
                self.figures(out, &window, i, keys);
            }
            if n > 1 {
                let peaks: Vec<u64> = window.peak[..n].iter().flatten().copied().collect();
                if peaks.len() == n {
                    let (min, max) = (peaks.iter().min(), peaks.iter().max());
                    if let (Some(&min), Some(&max)) = (min, max) {
                        if max > 0 {
                            out.push(KeyValue {
                                key: "gpu.memory.imbalance".into(),
                                value: Some(AnyValue {
                                    value: Some(Value::DoubleValue(
                                        (max - min) as f64 / max as f64,
                                    )),
                                }),
                                ..Default::default()
                            });
                        }
                    }
                }
            }
        }
        if let Some(samples) = window.samples {
            out.push(int("gpu.memory.samples", samples));
        }
        out.push(int(RESOLUTION_ATTRIBUTE, window.resolution_ns));
        out.push(KeyValue {
            key: "gpu.memory.source".into(),
            value: Some(AnyValue {
                value: Some(Value::StringValue(self.source.clone())),
            }),
            ..Default::default()
        });
        if let Some(process) = pid.and_then(|pid| timelines.process_window(pid, start, end)) {
            self.figures(
                out,
                &process,
                0,
                [
                    "gpu.process.memory.start",
                    "gpu.process.memory.end",
                    "gpu.process.memory.peak",
                ],
            );
        }
    }

    /// Start, end and peak of series `i`, each only where known.
    fn figures(&self, out: &mut Vec<KeyValue>, window: &WindowMax, i: usize, keys: [&str; 3]) {
        if let Some(Some(v)) = window.start.as_ref().map(|s| s[i]) {
            out.push(int(keys[0], v));
        }
        if let Some(Some(v)) = window.end.as_ref().map(|s| s[i]) {
            out.push(int(keys[1], v));
        }
        if let Some(v) = window.peak[i] {
            out.push(int(keys[2], v));
        }
    }
}

//! Puts GPU memory on received spans: each span's own start and end time looked up in the
//! collector's timelines, with the same attribute names the Rust macros record.

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::common::v1::{AnyValue, KeyValue};
use opentelemetry_proto::tonic::trace::v1::Span;

use super::store::WindowMax;
use gpuspan::names::attribute as attr;
use gpuspan::pipeline::{device_keys, Number, SpanFigures, Triple};
use gpuspan::source::GpuId;

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
#[derive(Debug, Clone)]
pub(crate) struct Enricher {
    source: String,
    /// Devices whose memory is summed into the figures.
    devices: usize,
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
            devices: device_ids.len(),
            device_keys,
        }
    }

    /// The most bytes enrichment adds to one span: every figure present, each an attribute
    /// with a key of its own, in a vector grown by exactly what is added. What the forward
    /// queue holds room for, for each span that may get figures.
    pub(crate) fn most_per_span(&self) -> usize {
        if self.devices == 0 {
            return 0;
        }
        let all = Triple::new(Some(1), Some(1), Some(1));
        let figures = SpanFigures {
            gpu: all,
            devices: if self.devices > 1 {
                vec![all; self.devices]
            } else {
                Vec::new()
            },
            process_gpu: all,
            samples: Some(1),
            resolution_ns: Some(1),
            process_resolution_ns: Some(1),
            ..SpanFigures::default()
        };
        let mut attributes = Vec::new();
        self.append(&figures, &mut attributes);
        super::size::attributes(&attributes)
    }

    /// Whether `span` may get figures: it carries none, and it does not end before the
    /// timelines' first sample (a span that does never gets any).
    pub(crate) fn may_enrich(&self, span: &Span, timelines: &Timelines) -> bool {
        self.devices > 0
            && !carries_figures(span)
            && timelines
                .earliest()
                .is_none_or(|first| span.end_time_unix_nano.max(span.start_time_unix_nano) >= first)
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
        if carries_figures(span) {
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
        self.append(&figures, &mut span.attributes);
    }

    /// Appends the attributes of `figures` to `out`, growing it by exactly as many (the
    /// forward queue counts on it, see [`Self::most_per_span`]).
    fn append(&self, figures: &SpanFigures, out: &mut Vec<KeyValue>) {
        let devices = figures
            .device_numbers()
            .filter(|(device, _, _)| *device < self.device_keys.len());
        out.reserve_exact(figures.numbers().count() + 1 + devices.count());
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

/// Whether a span already carries memory figures (its sender measured them itself).
fn carries_figures(span: &Span) -> bool {
    span.attributes
        .iter()
        .any(|kv| kv.key.starts_with(attr::GPU_MEMORY_PREFIX))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::collect::size;
    use crate::collect::testing::{request_of, step_span};
    use gpuspan::pipeline::Tick;

    /// Timelines of `devices` devices with samples from 1000 to 2000 ns.
    fn timelines(devices: u32) -> (Enricher, Timelines) {
        let ids: Vec<GpuId> = (0..devices).map(GpuId::gpu).collect();
        let timelines = Timelines::new(ids.clone(), Duration::from_nanos(100));
        let used = vec![Some(1 << 30); devices as usize];
        for t in (1000..=2000).step_by(100) {
            timelines.record(&Tick::of_devices(t, &used), None, 0);
        }
        (Enricher::new("nvml", &ids), timelines)
    }

    fn span_with(attributes: usize, spare: usize) -> Span {
        let mut span = step_span();
        span.start_time_unix_nano = 1200;
        span.end_time_unix_nano = 1800;
        span.attributes = Vec::with_capacity(attributes + spare);
        span.attributes.extend(
            (0..attributes)
                .map(|i| key_value(&format!("attribute.{i}"), Value::IntValue(i as i64))),
        );
        span
    }

    /// What enrichment adds to a span is never more than the room the forward queue holds
    /// for it, with one device and with eight, whatever the span's attributes' capacity.
    #[test]
    fn what_a_span_gets_fits_the_room_held_for_it() {
        for devices in [1, 2, 8] {
            let (enricher, timelines) = timelines(devices);
            let most = enricher.most_per_span();
            for (attributes, spare) in [(0, 0), (1, 0), (4, 0), (3, 1), (6, 10), (64, 0)] {
                let mut request = request_of(vec![span_with(attributes, spare)]);
                let before = size::traces(&request);
                let done = enricher.request(&mut request, &timelines);
                assert_eq!(done.enriched, 1);
                let added = size::traces(&request) - before;
                assert!(
                    added <= most,
                    "{devices} devices, {attributes} attributes: {added} added, {most} held"
                );
                assert!(added > 0);
            }
            eprintln!("{devices} devices: at most {most} bytes a span");
        }
        let (enricher, _) = timelines(0);
        assert_eq!(enricher.most_per_span(), 0);
    }

    /// A span that ended before the first sample, or carries its own figures, gets none,
    /// and no room is held for it.
    #[test]
    fn spans_that_get_no_figures_are_known_before() {
        let (enricher, timelines) = timelines(2);
        let mut early = span_with(1, 0);
        early.start_time_unix_nano = 10;
        early.end_time_unix_nano = 900;
        let mut measured = span_with(1, 0);
        measured
            .attributes
            .push(key_value(attr::GPU_MEMORY_PEAK, Value::IntValue(1)));
        let now = span_with(1, 0);
        assert!(!enricher.may_enrich(&early, &timelines));
        assert!(!enricher.may_enrich(&measured, &timelines));
        assert!(enricher.may_enrich(&now, &timelines));
        let mut request = request_of(vec![early, measured]);
        let done = enricher.request(&mut request, &timelines);
        assert_eq!(done.enriched, 0);
    }
}

//! A closed span's memory as numbers ([`SpanFigures`]), and the one table of its attributes
//! ([`columns`]): which key each figure is written under, as a tracing field, as an OTel
//! attribute, and where it lands when a span is read back into a [`SpanRecord`].
//!
//! The macros' spans, `gpuspan collect`'s enriched spans and the run directory's reader all
//! go through this table, so a key is spelled once ([`crate::names`]) and a figure is
//! converted to a wire value once ([`int`]).
//!
//! [`SpanRecord`]: crate::record::SpanRecord

mod columns;
mod read;

pub(crate) use columns::{Number, TRACED};
pub(crate) use read::RecordBuilder;

use opentelemetry::{Key, KeyValue, Value};

use crate::names::attribute as attr;

/// Start, end and peak of one figure over a span.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Triple {
    pub(crate) start: u64,
    pub(crate) end: u64,
    pub(crate) peak: u64,
}

/// One device's figures over a span; a device lost meanwhile has no end.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct DeviceTriple {
    pub(crate) start: Option<u64>,
    pub(crate) end: Option<u64>,
    pub(crate) peak: Option<u64>,
}

/// A closed span's memory, typed: `None` is "not measured", never zero. Made on the
/// training thread from the sampler's atomics (or by `gpuspan collect` from its timeline);
/// turned into OTel attributes off the training thread by [`SpanFigures::attributes`].
#[derive(Debug, Default)]
pub(crate) struct SpanFigures {
    pub(crate) gpu: Option<Triple>,
    pub(crate) process_gpu: Option<Triple>,
    pub(crate) host: Option<Triple>,
    pub(crate) allocated_peak: Option<u64>,
    pub(crate) reserved_peak: Option<u64>,
    /// Per device, only with more than one device in scope.
    pub(crate) devices: Vec<DeviceTriple>,
    pub(crate) samples: u64,
    /// Why the span failed: devices lost while it was open, or a panic.
    pub(crate) error: Option<String>,
}

impl SpanFigures {
    /// `gpu.memory.imbalance`: (max - min) / max of the device peaks, when every one of
    /// at least two devices has a peak and an end.
    pub(crate) fn imbalance(&self) -> Option<f64> {
        if self.devices.len() < 2 {
            return None;
        }
        let mut peaks = self.devices.iter().map(|d| d.peak);
        let first = peaks.next()??;
        let (mut low, mut high) = (first, first);
        for peak in peaks {
            let peak = peak?;
            low = low.min(peak);
            high = high.max(peak);
        }
        if self.devices.iter().any(|d| d.end.is_none()) || high == 0 {
            return None;
        }
        Some((high - low) as f64 / high as f64)
    }

    /// The OTel attributes: every column of the table, then the source, the sample count
    /// and the per-device figures (`device_keys[i]` = start, end and peak keys of device i).
    pub(crate) fn attributes(
        &self,
        source: Value,
        device_keys: &[[Key; 3]],
        out: &mut Vec<KeyValue>,
    ) {
        out.reserve(TRACED.len() + 2 + self.devices.len() * 3);
        for column in &TRACED {
            if let Some(number) = (column.read)(self) {
                out.push(KeyValue::new(column.key, number.value()));
            }
        }
        out.push(KeyValue::new(attr::GPU_MEMORY_SOURCE, source));
        out.push(KeyValue::new(attr::GPU_MEMORY_SAMPLES, int(self.samples)));
        for (device, keys) in self.devices.iter().zip(device_keys) {
            for (key, value) in keys.iter().zip([device.start, device.end, device.peak]) {
                if let Some(value) = value {
                    out.push(KeyValue::new(key.clone(), int(value)));
                }
            }
        }
    }

    /// Offers the figures to a record being read from the span's own attributes, exactly
    /// as reading the span again after [`SpanFigures::attributes`] would (a test checks
    /// both ways agree): the export thread then never parses its own keys back.
    pub(crate) fn offer_to(
        &self,
        record: &mut RecordBuilder,
        source: &str,
        device_indices: impl Iterator<Item = u32>,
    ) {
        for column in &TRACED {
            if let (Some(slot), Some(Number::Int(value))) = (column.slot, (column.read)(self)) {
                record.offer(slot, value);
            }
        }
        record.offer_source(source);
        record.offer(read::Slot::Samples, int(self.samples));
        for (index, device) in device_indices.zip(&self.devices) {
            for (figure, value) in [
                (read::DeviceFigure::Start, device.start),
                (read::DeviceFigure::End, device.end),
                (read::DeviceFigure::Peak, device.peak),
            ] {
                if let Some(value) = value {
                    record.offer_device(index, figure, int(value));
                }
            }
        }
    }
}

/// A byte count as an OTel integer: i64, saturating (tracing-opentelemetry would turn a
/// u64 into a string). The one conversion from a reading to a wire value.
pub(crate) fn int(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// End minus start, as a signed byte count.
pub(crate) fn delta(t: Triple) -> i64 {
    int(t.end).saturating_sub(int(t.start))
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, SystemTime};

    use opentelemetry::trace::{SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId};
    use opentelemetry::{InstrumentationScope, Key, KeyValue};
    use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanLinks};

    use super::{DeviceTriple, RecordBuilder, SpanFigures, Triple};
    use crate::record::SpanRecord;

    /// NVML indices 1, 3, 5...: not their positions, as with `CUDA_VISIBLE_DEVICES`.
    fn indices(devices: u32) -> Vec<u32> {
        (0..devices).map(|i| i * 2 + 1).collect()
    }

    fn keys(indices: &[u32]) -> Vec<[Key; 3]> {
        indices
            .iter()
            .map(|i| ["start", "end", "peak"].map(|f| Key::new(format!("gpu.{i}.memory.{f}"))))
            .collect()
    }

    fn span(name: &'static str, attributes: Vec<KeyValue>) -> SpanData {
        SpanData {
            span_context: SpanContext::new(
                TraceId::from(3_u128),
                SpanId::from(4),
                TraceFlags::SAMPLED,
                false,
                Default::default(),
            ),
            parent_span_id: SpanId::from(5),
            parent_span_is_remote: false,
            span_kind: SpanKind::Internal,
            name: name.into(),
            start_time: SystemTime::UNIX_EPOCH + Duration::from_secs(10),
            end_time: SystemTime::UNIX_EPOCH + Duration::from_secs(11),
            attributes,
            dropped_attributes_count: 0,
            events: SpanEvents::default(),
            links: SpanLinks::default(),
            status: Status::Unset,
            instrumentation_scope: InstrumentationScope::builder("gpuspan").build(),
        }
    }

    fn triple(base: u64) -> Option<Triple> {
        Some(Triple {
            start: base,
            end: base.saturating_add(7),
            peak: base.saturating_add(100),
        })
    }

    /// The record the export thread completes from the figures is the record read back
    /// from the attributes those figures become, for every shape of figures.
    #[test]
    fn a_record_completed_from_figures_equals_the_one_read_from_the_exported_span() {
        let own = |extra: Vec<KeyValue>| {
            let mut attributes = vec![
                KeyValue::new("ml.step", 12_i64),
                KeyValue::new("code.file.path", "train.rs"),
                KeyValue::new("batch_size", 64_i64),
            ];
            attributes.extend(extra);
            attributes
        };
        for devices in [0, 1, 2, 8] {
            for variant in 0..6 {
                let indices = indices(devices);
                let n = if devices > 1 { devices as usize } else { 0 };
                let mut figures = SpanFigures {
                    gpu: triple(1_000),
                    process_gpu: triple(500).filter(|_| variant != 1),
                    host: triple(u64::MAX - 5),
                    allocated_peak: (variant == 2).then_some(42),
                    reserved_peak: (variant >= 2).then_some(84),
                    devices: (0..n)
                        .map(|i| DeviceTriple {
                            start: Some(10 * i as u64),
                            end: (variant != 3 || i != 1).then_some(10 * i as u64 + 3),
                            peak: Some(10 * i as u64 + 9),
                        })
                        .collect(),
                    samples: 17,
                    error: (variant == 4).then(|| "device 1 was lost".to_owned()),
                };
                // The program recorded its own allocator peak on the span.
                let extra = if variant == 5 {
                    figures.reserved_peak = None;
                    vec![KeyValue::new("gpu.allocator.reserved.peak", 99_i64)]
                } else {
                    Vec::new()
                };
                let mut exported = span("step", own(extra.clone()));
                let mut completed = RecordBuilder::from_span_data(&exported);
                figures.offer_to(&mut completed, "nvml", indices.iter().copied());
                let mut ours = Vec::new();
                figures.attributes("nvml".into(), &keys(&indices), &mut ours);
                exported.attributes.extend(ours);
                if let Some(error) = &figures.error {
                    exported.status = Status::error(error.clone());
                    completed.error = Some(error.clone());
                }
                let completed = completed.finish();
                let read_back = SpanRecord::from_span_data(&exported);
                assert_eq!(completed, read_back, "{devices} devices, variant {variant}");
            }
        }
    }
}

//! A closed span's memory as numbers ([`SpanFigures`]), and the one table of its attributes
//! ([`columns`]): which key each figure is written under, as a tracing field, as an OTel
//! attribute, and where it lands when a span is read back into a [`SpanRecord`].
//!
//! The macros' spans (from the sampler's atomics), `gpuspan collect`'s enriched spans (from
//! its timeline's window) and the run directory's reader all go through this table, so a
//! key is spelled once ([`crate::names`]) and a figure is converted to a wire value once
//! ([`int`]).
//!
//! [`SpanRecord`]: crate::record::SpanRecord

mod columns;
mod read;

pub(crate) use columns::{Number, TRACED};
pub(crate) use read::RecordBuilder;

use opentelemetry::{Key, KeyValue, Value};

use crate::names::attribute as attr;

/// Start, end and peak of one figure over a span, each where it was measured: a sum over
/// the devices has all three or none; a device lost meanwhile has no end; a window older
/// than the collector's full resolution has a peak only.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Triple {
    pub(crate) start: Option<u64>,
    pub(crate) end: Option<u64>,
    pub(crate) peak: Option<u64>,
}

impl Triple {
    /// All three figures.
    pub(crate) fn whole(start: u64, end: u64, peak: u64) -> Self {
        Self {
            start: Some(start),
            end: Some(end),
            peak: Some(peak),
        }
    }

    /// End minus start, as a signed byte count.
    fn delta(&self) -> Option<i64> {
        Some(int(self.end?).saturating_sub(int(self.start?)))
    }

    /// There at the start and gone at the end.
    fn lost(&self) -> bool {
        self.start.is_some() && self.end.is_none()
    }
}

/// A closed span's memory, typed: `None` is "not measured", never zero. Made on the
/// training thread from the sampler's atomics (or by `gpuspan collect` from a timeline);
/// turned into attributes off the training thread, from the attribute table.
#[derive(Debug, Default)]
pub(crate) struct SpanFigures {
    pub(crate) gpu: Triple,
    pub(crate) process_gpu: Triple,
    pub(crate) host: Triple,
    pub(crate) allocated_peak: Option<u64>,
    pub(crate) reserved_peak: Option<u64>,
    /// Per device, only with more than one device in scope.
    pub(crate) devices: Vec<Triple>,
    pub(crate) samples: Option<u64>,
    /// The width, in nanoseconds, each figure stands for, on the spans `gpuspan collect`
    /// enriches (its sampling interval, or the bucket width of an older window).
    pub(crate) resolution_ns: Option<u64>,
    /// How often, in ns, the process lists behind `process_gpu` were read (the widest
    /// while the span was open).
    pub(crate) process_resolution_ns: Option<u64>,
    /// Why the span failed: devices lost while it was open, or a panic.
    pub(crate) error: Option<String>,
}

impl SpanFigures {
    /// `gpu.memory.imbalance`: (max - min) / max of the device peaks, when at least two
    /// devices all have a peak and none was lost while the span was open.
    pub(crate) fn imbalance(&self) -> Option<f64> {
        if self.devices.len() < 2 || self.devices.iter().any(Triple::lost) {
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
        (high > 0).then(|| (high - low) as f64 / high as f64)
    }

    /// Every numeric attribute but the per-device ones, in the table's order, then the
    /// sample count and the resolutions (the process figures' only when they were read).
    pub(crate) fn numbers(&self) -> impl Iterator<Item = (&'static str, Number)> + '_ {
        let process_resolution = self.process_resolution_ns.filter(|_| {
            let p = self.process_gpu;
            p.start.is_some() || p.end.is_some() || p.peak.is_some()
        });
        let extra = [
            (attr::GPU_MEMORY_SAMPLES, self.samples),
            (attr::GPU_MEMORY_RESOLUTION, self.resolution_ns),
            (attr::GPU_PROCESS_MEMORY_RESOLUTION, process_resolution),
        ];
        TRACED
            .iter()
            .filter_map(|column| Some((column.key, (column.read)(self)?)))
            .chain(
                extra
                    .into_iter()
                    .filter_map(|(key, v)| Some((key, Number::Int(int(v?))))),
            )
    }

    /// The per-device figures that were measured: (position in `devices`, 0 = start,
    /// 1 = end, 2 = peak, value).
    pub(crate) fn device_numbers(&self) -> impl Iterator<Item = (usize, usize, i64)> + '_ {
        self.devices.iter().enumerate().flat_map(|(i, d)| {
            [d.start, d.end, d.peak]
                .into_iter()
                .enumerate()
                .filter_map(move |(figure, v)| Some((i, figure, int(v?))))
        })
    }

    /// The OTel attributes: [`numbers`](Self::numbers), the source, then the per-device
    /// figures (`device_keys[i]` = start, end and peak keys of device i).
    pub(crate) fn attributes(
        &self,
        source: Value,
        device_keys: &[[Key; 3]],
        out: &mut Vec<KeyValue>,
    ) {
        out.reserve(TRACED.len() + 3 + self.devices.len() * 3);
        out.extend(self.numbers().map(|(key, n)| KeyValue::new(key, n.value())));
        out.push(KeyValue::new(attr::GPU_MEMORY_SOURCE, source));
        for (device, figure, value) in self.device_numbers() {
            if let Some(keys) = device_keys.get(device) {
                out.push(KeyValue::new(keys[figure].clone(), value));
            }
        }
    }

    /// Offers the figures to a record being read from the span's own attributes, exactly
    /// as reading the span again after [`SpanFigures::attributes`] would (a test checks
    /// both ways agree): the export thread then never parses its own keys back.
    pub(crate) fn offer_to(&self, record: &mut RecordBuilder, source: &str, indices: &[u32]) {
        for column in &TRACED {
            if let (Some(slot), Some(Number::Int(value))) = (column.slot, (column.read)(self)) {
                record.offer(slot, value);
            }
        }
        if let Some(samples) = self.samples {
            record.offer(columns::Slot::Samples, int(samples));
        }
        record.offer_source(source);
        for (device, figure, value) in self.device_numbers() {
            if let Some(&index) = indices.get(device) {
                record.offer_device(index, columns::DeviceFigure::ALL[figure], value);
            }
        }
    }
}

/// `gpu.<index>.memory.start`, `.end` and `.peak`: the keys of one device's figures.
pub(crate) fn device_keys(index: u32) -> [String; 3] {
    ["start", "end", "peak"].map(|figure| {
        format!(
            "{}{index}{}{figure}",
            attr::GPU_DEVICE_PREFIX,
            attr::GPU_DEVICE_MEMORY_INFIX
        )
    })
}

/// A byte count as an OTel integer: i64, saturating (tracing-opentelemetry would turn a
/// u64 into a string). The one conversion from a reading to a wire value.
pub(crate) fn int(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, SystemTime};

    use opentelemetry::trace::{SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId};
    use opentelemetry::{InstrumentationScope, Key, KeyValue};
    use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanLinks};

    use super::{RecordBuilder, SpanFigures, Triple};
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

    fn triple(base: u64) -> Triple {
        Triple::whole(base, base.saturating_add(7), base.saturating_add(100))
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
                    process_gpu: if variant == 1 {
                        Triple::default()
                    } else {
                        triple(500)
                    },
                    host: triple(u64::MAX - 5),
                    allocated_peak: (variant == 2).then_some(42),
                    reserved_peak: (variant >= 2).then_some(84),
                    devices: (0..n)
                        .map(|i| Triple {
                            start: Some(10 * i as u64),
                            end: (variant != 3 || i != 1).then_some(10 * i as u64 + 3),
                            peak: Some(10 * i as u64 + 9),
                        })
                        .collect(),
                    samples: Some(17),
                    resolution_ns: None,
                    process_resolution_ns: Some(5_000_000),
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
                figures.offer_to(&mut completed, "nvml", &indices);
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

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
pub(crate) mod energy;
mod read;
mod reading;
mod watermark;

pub use columns::Number;
use columns::Slot;
pub(crate) use columns::TRACED;
pub(crate) use energy::SpanEnergy;
pub use energy::SpanPower;
pub use read::SpanReader;
pub(crate) use read::{Attr, RecordBuilder};
pub(crate) use reading::AtomicReading;
pub(crate) use reading::Reading;
pub(crate) use watermark::Watermark;

use std::sync::Arc;

use opentelemetry::{Key, KeyValue, Value};

use crate::names::attribute as attr;
use crate::record::GpuId;

/// Start, end and peak of one figure over a span, each where it was measured: a sum over
/// the devices has all three or none; a device lost meanwhile has no end; a window older
/// than the collector's full resolution has a peak only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Triple {
    start: Reading,
    end: Reading,
    peak: Reading,
}

impl Default for Triple {
    /// Nothing measured.
    fn default() -> Self {
        Self::new(None, None, None)
    }
}

impl Triple {
    /// The figures that were measured.
    pub fn new(start: Option<u64>, end: Option<u64>, peak: Option<u64>) -> Self {
        Self::of(start.into(), end.into(), peak.into())
    }

    /// The readings as they were taken.
    pub(crate) const fn of(start: Reading, end: Reading, peak: Reading) -> Self {
        Self { start, end, peak }
    }

    pub(crate) fn start(&self) -> Option<u64> {
        self.start.get()
    }

    pub(crate) fn end(&self) -> Option<u64> {
        self.end.get()
    }

    pub(crate) fn peak(&self) -> Option<u64> {
        self.peak.get()
    }

    /// End minus start, as a signed byte count.
    fn delta(&self) -> Option<i64> {
        Some(int(self.end()?).saturating_sub(int(self.start()?)))
    }

    /// There at the start and gone at the end.
    fn lost(&self) -> bool {
        self.start().is_some() && self.end().is_none()
    }
}

/// A closed span's memory, typed: `None` is "not measured", never zero. Made on the
/// training thread from the sampler's atomics (or by `gpuspan collect` from a timeline);
/// turned into attributes off the training thread, from the attribute table.
#[derive(Debug, Default)]
pub struct SpanFigures {
    /// Device memory, summed over the devices in scope (`gpu.memory.*`).
    pub gpu: Triple,
    /// This process's GPU memory (`gpu.process.memory.*`).
    pub process_gpu: Triple,
    /// Host resident memory (`process.memory.*`).
    pub host: Triple,
    /// The allocator's allocated peak (`gpu.allocator.allocated.peak`).
    pub allocated_peak: Reading,
    /// The allocator's reserved peak (`gpu.allocator.reserved.peak`).
    pub reserved_peak: Reading,
    /// Per device, only with more than one device in scope.
    pub devices: Vec<Triple>,
    /// How many samples the peak was taken over (`gpu.memory.samples`).
    pub samples: Option<u64>,
    /// The width, in nanoseconds, each figure stands for, on the spans `gpuspan collect`
    /// enriches (its sampling interval, or the bucket width of an older window).
    pub resolution_ns: Option<u64>,
    /// How often, in ns, the process lists behind `process_gpu` were read (the widest
    /// while the span was open).
    pub process_resolution_ns: Option<u64>,
    /// Why the span failed: devices lost while it was open, or a panic.
    pub error: Option<String>,
    /// Energy, power and clocks while the span was open (`gpu.energy`, ...), read on the
    /// export thread.
    pub power: SpanPower,
}

impl SpanFigures {
    /// `gpu.memory.imbalance`: (max - min) / max of the device peaks, when at least two
    /// devices all have a peak and none was lost while the span was open.
    pub(crate) fn imbalance(&self) -> Option<f64> {
        if self.devices.len() < 2 || self.devices.iter().any(Triple::lost) {
            return None;
        }
        let mut peaks = self.devices.iter().map(Triple::peak);
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
    #[cfg(feature = "pipeline")]
    pub fn numbers(&self) -> impl Iterator<Item = (&'static str, Number)> + '_ {
        TRACED
            .iter()
            .filter_map(|column| Some((column.key, (column.read)(self)?)))
            .chain(
                self.counts()
                    .into_iter()
                    .filter_map(|(key, _, v)| Some((key, Number::Int(int(v?))))),
            )
    }

    /// The figures after the table's: the sample count and the resolutions, each with its
    /// slot in a record, if it has one.
    fn counts(&self) -> [(&'static str, Option<Slot>, Option<u64>); 3] {
        let process_resolution = self.process_resolution_ns.filter(|_| {
            let p = self.process_gpu;
            p.start().is_some() || p.end().is_some() || p.peak().is_some()
        });
        [
            (attr::GPU_MEMORY_SAMPLES, Some(Slot::Samples), self.samples),
            (attr::GPU_MEMORY_RESOLUTION, None, self.resolution_ns),
            (
                attr::GPU_PROCESS_MEMORY_RESOLUTION,
                None,
                process_resolution,
            ),
        ]
    }

    /// The per-device figures that were measured: (position in `devices`, 0 = start,
    /// 1 = end, 2 = peak, value).
    pub fn device_numbers(&self) -> impl Iterator<Item = (usize, usize, i64)> + '_ {
        self.devices.iter().enumerate().flat_map(|(i, d)| {
            [d.start(), d.end(), d.peak()]
                .into_iter()
                .enumerate()
                .filter_map(move |(figure, v)| Some((i, figure, int(v?))))
        })
    }

    /// Writes the OTel attributes to `out` ([`numbers`](Self::numbers), the source, then
    /// the per-device figures) and, when the taps need one, offers the same figures to
    /// `record`, exactly as reading the span back would (a test checks both ways agree): the
    /// export thread reads each figure once and never parses its own keys back.
    pub(crate) fn write(
        &self,
        devices: &DeviceNames<'_>,
        out: &mut Vec<KeyValue>,
        mut record: Option<&mut RecordBuilder>,
    ) {
        out.reserve(TRACED.len() + 4 + self.devices.len() * 3);
        let mut offer = |slot: Option<Slot>, number: Number| {
            if let (Some(record), Some(slot), Number::Int(value)) =
                (record.as_deref_mut(), slot, number)
            {
                record.offer(slot, value);
            }
        };
        for column in &TRACED {
            if let Some(number) = (column.read)(self) {
                offer(column.slot, number);
                out.push(KeyValue::new(column.key, number.value()));
            }
        }
        for (key, slot, value) in self.counts() {
            if let Some(value) = value {
                let number = Number::Int(int(value));
                offer(slot, number);
                out.push(KeyValue::new(key, number.value()));
            }
        }
        out.push(KeyValue::new(
            attr::GPU_MEMORY_SOURCE,
            devices.source_value(),
        ));
        if let Some(record) = record.as_deref_mut() {
            record.offer_source(devices.source);
        }
        for (device, figure, value) in self.device_numbers() {
            if let Some(keys) = devices.keys.get(device) {
                out.push(KeyValue::new(keys[figure].clone(), value));
            }
            if let (Some(record), Some(&id)) = (record.as_deref_mut(), devices.ids.get(device)) {
                record.offer_device(id, columns::DeviceFigure::ALL[figure], value);
            }
        }
    }
}

/// What the figures of a span of the macros are written with: the memory source and, for
/// each device in scope, its attribute keys and identity.
pub(crate) struct DeviceNames<'a> {
    pub(crate) source: &'a Arc<str>,
    pub(crate) keys: &'a [[Key; 3]],
    pub(crate) ids: &'a [GpuId],
}

impl DeviceNames<'_> {
    fn source_value(&self) -> Value {
        Value::String(Arc::clone(self.source).into())
    }
}

/// `gpu.<id>.memory.start`, `.end` and `.peak`: the keys of one device's figures.
pub fn device_keys(id: GpuId) -> [String; 3] {
    ["start", "end", "peak"].map(|figure| {
        format!(
            "{}{id}{}{figure}",
            attr::GPU_DEVICE_PREFIX,
            attr::GPU_DEVICE_MEMORY_INFIX
        )
    })
}

/// The attributes that name a device on events and device metrics: `gpu.index`, and for a
/// MIG instance `gpu.mig.index`.
pub(crate) fn device_attributes(id: GpuId) -> impl Iterator<Item = KeyValue> {
    std::iter::once(KeyValue::new(attr::GPU_INDEX, i64::from(id.index))).chain(
        id.mig
            .map(|mig| KeyValue::new(attr::GPU_MIG_INDEX, i64::from(mig))),
    )
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

    use std::sync::Arc;

    use super::{DeviceNames, Reading, RecordBuilder, SpanFigures, Triple};
    use crate::record::{GpuId, SpanRecord};

    /// NVML indices 1, 5, 9...: not their positions, as with `CUDA_VISIBLE_DEVICES`; and
    /// between them MIG instances of GPU 0 (`gpu.0.mig1.memory.*`).
    fn indices(devices: u32) -> Vec<GpuId> {
        (0..devices)
            .map(|i| match i % 2 {
                0 => GpuId::gpu(i * 2 + 1),
                _ => GpuId::mig(0, i),
            })
            .collect()
    }

    fn keys(indices: &[GpuId]) -> Vec<[Key; 3]> {
        indices
            .iter()
            .map(|i| ["start", "end", "peak"].map(|f| Key::new(format!("gpu.{i}.memory.{f}"))))
            .collect()
    }

    /// A span as the exporter gets it, named `name` with `attributes`; its read-back tests
    /// use it too.
    pub(super) fn span(name: &'static str, attributes: Vec<KeyValue>) -> SpanData {
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
        Triple::new(
            Some(base),
            Some(base.saturating_add(7)),
            Some(base.saturating_add(100)),
        )
    }

    /// The record the export thread completes from the figures is the record read back
    /// from the attributes those figures become, for every shape of figures; with no taps
    /// to feed, the attributes are the same.
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
                    allocated_peak: (variant == 2).then_some(42).into(),
                    reserved_peak: (variant >= 2).then_some(84).into(),
                    devices: (0..n)
                        .map(|i| {
                            Triple::new(
                                Some(10 * i as u64),
                                (variant != 3 || i != 1).then_some(10 * i as u64 + 3),
                                Some(10 * i as u64 + 9),
                            )
                        })
                        .collect(),
                    samples: Some(17),
                    resolution_ns: None,
                    process_resolution_ns: Some(5_000_000),
                    error: (variant == 4).then(|| "device 1 was lost".to_owned()),
                    power: Default::default(),
                };
                // The program recorded its own allocator peak on the span.
                let extra = if variant == 5 {
                    figures.reserved_peak = Reading::NONE;
                    vec![KeyValue::new("gpu.allocator.reserved.peak", 99_i64)]
                } else {
                    Vec::new()
                };
                let mut exported = span("step", own(extra.clone()));
                let mut completed = RecordBuilder::from_span_data(&exported);
                let source: Arc<str> = "nvml".into();
                let keys = keys(&indices);
                let names = DeviceNames {
                    source: &source,
                    keys: &keys,
                    ids: &indices,
                };
                let mut ours = Vec::new();
                figures.write(&names, &mut ours, Some(&mut completed));
                let mut without_taps = Vec::new();
                figures.write(&names, &mut without_taps, None);
                assert_eq!(ours, without_taps);
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

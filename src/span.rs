//! The guard returned by `epoch_span!`, `step_span!` and `memory_span!`: it keeps the span
//! entered and, when dropped, measures the span's memory ([`SpanFigures`]) before it closes.
//!
//! The figures leave by one route: recorded as the span's tracing fields for every
//! subscriber, and handed with the closing span to the export thread, which makes them OTel
//! attributes (see `layer.rs`). The training thread copies a few atomics and nothing more.

use std::sync::{Arc, OnceLock};

use opentelemetry::{Key, KeyValue};
use tracing::field::{Field, Value};
use tracing::span::EnteredSpan;

use crate::layer::{current, LayerState};
use crate::sampler::{figure, Shared, Watermark};

/// The memory fields of one macro call site, looked up by name once and reused, so a
/// closing span records all of them in a single `record_all` call.
#[doc(hidden)]
#[derive(Debug)]
pub struct FieldCache(OnceLock<Option<MemoryFields>>);

impl FieldCache {
    /// An empty cache, for a `static` in the macro expansion.
    #[allow(clippy::new_without_default)]
    pub const fn new() -> Self {
        Self(OnceLock::new())
    }

    fn get(&'static self, span: &tracing::Span) -> Option<&'static MemoryFields> {
        self.0
            .get_or_init(|| span.metadata().and_then(|m| MemoryFields::find(m.fields())))
            .as_ref()
    }
}

/// Handles of the fields the macros declare.
#[derive(Debug)]
struct MemoryFields {
    gpu: [Field; 4],
    imbalance: Field,
    process_gpu: [Field; 3],
    allocated_peak: Field,
    reserved_peak: Field,
    host: [Field; 3],
}

impl MemoryFields {
    fn find(fields: &tracing::field::FieldSet) -> Option<Self> {
        let f = |name: &str| fields.field(name);
        Some(Self {
            gpu: [
                f("gpu.memory.start")?,
                f("gpu.memory.end")?,
                f("gpu.memory.peak")?,
                f("gpu.memory.delta")?,
            ],
            imbalance: f("gpu.memory.imbalance")?,
            process_gpu: [
                f("gpu.process.memory.start")?,
                f("gpu.process.memory.end")?,
                f("gpu.process.memory.peak")?,
            ],
            allocated_peak: f("gpu.allocator.allocated.peak")?,
            reserved_peak: f("gpu.allocator.reserved.peak")?,
            host: [
                f("process.memory.start")?,
                f("process.memory.end")?,
                f("process.memory.peak")?,
            ],
        })
    }
}

/// An entered span that records GPU and host memory on itself when dropped.
///
/// Created by [`epoch_span!`](crate::epoch_span), [`step_span!`](crate::step_span) and
/// [`memory_span!`](crate::memory_span). Keep it alive for the scope to measure
/// (`let _s = ...;`, not `let _ = ...;`, which drops it at once).
///
/// Like [`tracing::span::EnteredSpan`], it is not `Send`: it marks the span as current on
/// the thread that created it. Inside async code, hold it in the task that opened it.
#[must_use = "the span closes (and records its memory) when this guard is dropped"]
#[derive(Debug)]
pub struct MemorySpan {
    tracking: Option<Tracking>,
    /// Taken in `drop`, after the figures are recorded, so the span closes then.
    span: Option<EnteredSpan>,
}

#[derive(Debug)]
struct Tracking {
    fields: &'static MemoryFields,
    state: Arc<LayerState>,
    watermark: Arc<Watermark>,
}

impl MemorySpan {
    /// Enters `span` and starts tracking memory for it. Used by the macros.
    #[doc(hidden)]
    pub fn enter(span: tracing::Span, fields: &'static FieldCache) -> Self {
        let tracking = if span.is_disabled() {
            None
        } else {
            current().and_then(|state| {
                Some(Tracking {
                    fields: fields.get(&span)?,
                    watermark: state.shared.open_watermark()?,
                    state,
                })
            })
        };
        Self {
            tracking,
            span: Some(span.entered()),
        }
    }

    /// The underlying tracing span, to record more fields or to pass as a parent.
    pub fn span(&self) -> &tracing::Span {
        static NONE: std::sync::LazyLock<tracing::Span> =
            std::sync::LazyLock::new(tracing::Span::none);
        self.span.as_deref().unwrap_or(&NONE)
    }

    /// Memory now and the highest so far in this span, from the sampler's latest reading
    /// (no device is read). `None` when gpuspan is not installed or the span is disabled.
    pub fn memory(&self) -> Option<SpanMemory> {
        let tracking = self.tracking.as_ref()?;
        let shared = &*tracking.state.shared;
        let watermark = &*tracking.watermark;
        let peak = |figure: usize| {
            [watermark.peak(figure), shared.latest(figure)]
                .into_iter()
                .flatten()
                .max()
        };
        Some(SpanMemory {
            gpu_used: shared.latest(figure::GPU_USED),
            gpu_peak: peak(figure::GPU_USED),
            host_resident: shared.latest(figure::HOST_RSS),
            host_peak: peak(figure::HOST_RSS),
        })
    }
}

/// Memory of an open span, for progress lines: see [`MemorySpan::memory`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SpanMemory {
    /// Device memory in use now, summed over the devices in scope (`None` without a GPU).
    pub gpu_used: Option<u64>,
    /// Highest device memory since the span opened.
    pub gpu_peak: Option<u64>,
    /// Host resident memory of this process now.
    pub host_resident: Option<u64>,
    /// Highest host resident memory since the span opened.
    pub host_peak: Option<u64>,
}

impl Drop for MemorySpan {
    fn drop(&mut self) {
        let Some(span) = self.span.take() else { return };
        match self.tracking.take() {
            Some(tracking) => {
                let figures = SpanFigures::measure(&tracking.state.shared, &tracking.watermark);
                tracking.watermark.close();
                figures.record_fields(tracking.fields, &span);
                crate::layer::hand_over(span, figures);
            }
            None => drop(span),
        }
    }
}

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
/// training thread from the sampler's atomics; turned into OTel attributes on the export
/// thread by [`SpanFigures::attributes`], the one conversion to wire values.
#[derive(Debug)]
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
    /// Reads the span's figures: start from the watermark, end from the latest reading,
    /// peak the highest of both and every sample between.
    fn measure(shared: &Arc<Shared>, watermark: &Watermark) -> Self {
        let triple = |figure: usize| {
            let (start, end) = (watermark.start(figure)?, shared.latest(figure)?);
            let peak = watermark.peak(figure).unwrap_or(start).max(start).max(end);
            Some(Triple { start, end, peak })
        };
        // Sums whose start and end cover different devices (one fell off meanwhile) would
        // read as memory freed or taken: leave them out.
        let same_devices = watermark.start_failing() == shared.failing();
        let sum = |figure: usize| triple(figure).filter(|_| same_devices);
        let devices = if shared.devices().len() > 1 {
            (0..shared.devices().len())
                .map(|i| {
                    let figure = figure::DEVICE0 + i;
                    match triple(figure) {
                        Some(t) => DeviceTriple {
                            start: Some(t.start),
                            end: Some(t.end),
                            peak: Some(t.peak),
                        },
                        None => DeviceTriple {
                            start: watermark.start(figure),
                            end: None,
                            peak: watermark
                                .start(figure)
                                .map(|start| watermark.peak(figure).unwrap_or(start).max(start)),
                        },
                    }
                })
                .collect()
        } else {
            Vec::new()
        };
        let errors = watermark.errors();
        let error = if std::thread::panicking() {
            Some("panicked while the span was open".to_owned())
        } else {
            (errors != 0).then(|| shared.describe_errors(errors))
        };
        Self {
            gpu: sum(figure::GPU_USED),
            process_gpu: sum(figure::PROCESS_GPU),
            host: triple(figure::HOST_RSS),
            allocated_peak: watermark.peak(figure::ALLOCATED),
            reserved_peak: watermark.peak(figure::RESERVED),
            devices,
            samples: watermark.samples(),
            error,
        }
    }

    /// `gpu.memory.imbalance`: (max - min) / max of the device peaks, when every one of
    /// at least two devices has a peak.
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

    /// Records the figures as the span's tracing fields, for every subscriber but the OTel
    /// layer (which gets them from the export thread).
    fn record_fields(&self, fields: &MemoryFields, span: &tracing::Span) {
        let Some(metadata) = span.metadata() else {
            return;
        };
        let ints = |t: Option<Triple>| match t {
            Some(t) => [Some(int(t.start)), Some(int(t.end)), Some(int(t.peak))],
            None => [None; 3],
        };
        let [gpu_start, gpu_end, gpu_peak] = ints(self.gpu);
        let gpu_delta = self.gpu.map(delta);
        let [process_start, process_end, process_peak] = ints(self.process_gpu);
        let [host_start, host_end, host_peak] = ints(self.host);
        let allocated = self.allocated_peak.map(int);
        let reserved = self.reserved_peak.map(int);
        let imbalance = self.imbalance();
        let values = [
            (&fields.gpu[0], value(&gpu_start)),
            (&fields.gpu[1], value(&gpu_end)),
            (&fields.gpu[2], value(&gpu_peak)),
            (&fields.gpu[3], value(&gpu_delta)),
            (&fields.imbalance, value(&imbalance)),
            (&fields.process_gpu[0], value(&process_start)),
            (&fields.process_gpu[1], value(&process_end)),
            (&fields.process_gpu[2], value(&process_peak)),
            (&fields.allocated_peak, value(&allocated)),
            (&fields.reserved_peak, value(&reserved)),
            (&fields.host[0], value(&host_start)),
            (&fields.host[1], value(&host_end)),
            (&fields.host[2], value(&host_peak)),
        ];
        crate::layer::record_memory_fields(|| {
            span.record_all(&metadata.fields().value_set(&values));
        });
    }

    /// The OTel attributes: the same figures as the tracing fields, plus the per-device
    /// ones. Runs on the export thread.
    pub(crate) fn attributes(&self, shared: &Shared, out: &mut Vec<KeyValue>) {
        out.reserve(16 + self.devices.len() * 3);
        let mut triple = |keys: &[&'static str; 3], t: Option<Triple>| {
            if let Some(t) = t {
                out.push(KeyValue::new(keys[0], int(t.start)));
                out.push(KeyValue::new(keys[1], int(t.end)));
                out.push(KeyValue::new(keys[2], int(t.peak)));
            }
        };
        triple(
            &["gpu.memory.start", "gpu.memory.end", "gpu.memory.peak"],
            self.gpu,
        );
        triple(
            &[
                "gpu.process.memory.start",
                "gpu.process.memory.end",
                "gpu.process.memory.peak",
            ],
            self.process_gpu,
        );
        triple(
            &[
                "process.memory.start",
                "process.memory.end",
                "process.memory.peak",
            ],
            self.host,
        );
        if let Some(gpu) = self.gpu {
            out.push(KeyValue::new("gpu.memory.delta", delta(gpu)));
        }
        if let Some(imbalance) = self.imbalance() {
            out.push(KeyValue::new("gpu.memory.imbalance", imbalance));
        }
        if let Some(peak) = self.allocated_peak {
            out.push(KeyValue::new("gpu.allocator.allocated.peak", int(peak)));
        }
        if let Some(peak) = self.reserved_peak {
            out.push(KeyValue::new("gpu.allocator.reserved.peak", int(peak)));
        }
        out.push(KeyValue::new("gpu.memory.source", shared.source_value()));
        out.push(KeyValue::new("gpu.memory.samples", int(self.samples)));
        for (i, device) in self.devices.iter().enumerate() {
            let [start_key, end_key, peak_key] = shared.device_keys(i);
            let mut push = |key: &Key, v: Option<u64>| {
                if let Some(v) = v {
                    out.push(KeyValue::new(key.clone(), int(v)));
                }
            };
            push(start_key, device.start);
            push(end_key, device.end);
            push(peak_key, device.peak);
        }
    }
}

impl SpanFigures {
    /// Completes a record read from the span's own attributes with these figures, exactly
    /// as reading the span again after [`SpanFigures::attributes`] would (a test checks
    /// both ways agree): the export thread then never parses its own keys back.
    pub(crate) fn complete_record(&self, shared: &Shared, record: &mut crate::runlog::SpanRecord) {
        use crate::runlog::Memory;
        let memory = |t: Option<Triple>| {
            t.map(|t| Memory {
                start: int(t.start),
                peak: int(t.peak),
                end: int(t.end),
            })
        };
        // A key already on the span came first, and the first one counts.
        record.gpu = record.gpu.or(memory(self.gpu));
        record.process_gpu = record.process_gpu.or(memory(self.process_gpu));
        record.host = record.host.or(memory(self.host));
        record.allocated_peak = record.allocated_peak.or(self.allocated_peak.map(int));
        record.reserved_peak = record.reserved_peak.or(self.reserved_peak.map(int));
        record.samples = record.samples.or(Some(int(self.samples)));
        if record.source.is_none() {
            record.source = Some(shared.source_name().to_owned());
        }
        // Per-device figures: the last key counts, as when reading them back.
        for (device, figures) in shared.devices().iter().zip(&self.devices) {
            for (figure, value) in [
                ("start", figures.start),
                ("end", figures.end),
                ("peak", figures.peak),
            ] {
                if let Some(value) = value {
                    crate::runlog::device_figure(
                        &mut record.devices,
                        device.index,
                        figure,
                        int(value),
                    );
                }
            }
        }
        record.devices.sort_by_key(|d| d.index);
    }
}

/// A byte count as an OTel integer: i64, saturating (tracing-opentelemetry would turn a
/// u64 into a string). The one conversion from a reading to a wire value.
pub(crate) fn int(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

/// End minus start, as a signed byte count.
fn delta(t: Triple) -> i64 {
    int(t.end).saturating_sub(int(t.start))
}

fn value<T: Value>(v: &Option<T>) -> Option<&dyn Value> {
    v.as_ref().map(|v| v as &dyn Value)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::{Duration, SystemTime};

    use opentelemetry::trace::{SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId};
    use opentelemetry::{InstrumentationScope, KeyValue};
    use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanLinks};

    use super::{DeviceTriple, SpanFigures, Triple};
    use crate::runlog::SpanRecord;
    use crate::sampler::Shared;
    use crate::source::Device;

    fn shared(devices: u32) -> Arc<Shared> {
        let devices = (0..devices)
            .map(|i| Device {
                index: i * 2 + 1,
                uuid: format!("GPU-{i}"),
                name: "fake".into(),
                vendor: "nvidia".into(),
            })
            .collect();
        Arc::new(Shared::new(
            "nvml".into(),
            devices,
            Duration::from_millis(5),
        ))
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
                let shared = shared(devices);
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
                let mut completed = SpanRecord::from_span_data(&exported);
                figures.complete_record(&shared, &mut completed);
                let mut ours = Vec::new();
                figures.attributes(&shared, &mut ours);
                exported.attributes.extend(ours);
                if let Some(error) = &figures.error {
                    exported.status = Status::error(error.clone());
                    completed.error = Some(error.clone());
                }
                let read_back = SpanRecord::from_span_data(&exported);
                assert_eq!(completed, read_back, "{devices} devices, variant {variant}");
            }
        }
    }
}

//! The guard returned by `epoch_span!`, `step_span!` and `memory_span!`: it keeps the span
//! entered and, when dropped, records the memory attributes on it before it closes.

use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use opentelemetry::trace::{Status, TraceContextExt};
use opentelemetry::KeyValue;
use tracing::field::{Field, Value};
use tracing::span::EnteredSpan;
use tracing_opentelemetry::OpenTelemetrySpanExt;

use crate::layer::{current, LayerState};
use crate::runlog::{EpochSummary, Memory};
use crate::sampler::{figure, Watermark, ABSENT};

/// What a span stands for, which decides the duration histogram it feeds.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpanRole {
    /// `epoch_span!` with its index: feeds `ml.epoch.duration` and the run's summary.
    Epoch(i64),
    /// `step_span!`: feeds `ml.step.duration`.
    Step,
    /// `memory_span!`: memory attributes only.
    Other,
}

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
    source: Field,
    samples: Field,
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
            source: f("gpu.memory.source")?,
            samples: f("gpu.memory.samples")?,
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
    // Declared first so memory is recorded in `drop` while the span is still open; the
    // span closes when this field is dropped, after `drop` returns.
    tracking: Option<Tracking>,
    span: EnteredSpan,
}

#[derive(Debug)]
struct Tracking {
    fields: &'static MemoryFields,
    /// Steps closed in this subscriber when the span opened, to count an epoch's steps.
    steps_at_open: u64,
    state: Arc<LayerState>,
    watermark: Arc<Watermark>,
    role: SpanRole,
    opened: Instant,
}

impl MemorySpan {
    /// Enters `span` and starts tracking memory for it. Used by the macros.
    #[doc(hidden)]
    pub fn enter(span: tracing::Span, role: SpanRole, fields: &'static FieldCache) -> Self {
        let tracking = if span.is_disabled() {
            None
        } else {
            match (current(), fields.get(&span)) {
                (Some(state), Some(fields)) => Some(Tracking {
                    fields,
                    steps_at_open: state.steps_closed.load(Ordering::Relaxed),
                    watermark: state.shared.open_watermark(),
                    state,
                    role,
                    opened: Instant::now(),
                }),
                _ => None,
            }
        };
        Self {
            tracking,
            span: span.entered(),
        }
    }

    /// The underlying tracing span, to record more fields or to pass as a parent.
    pub fn span(&self) -> &tracing::Span {
        &self.span
    }

    /// Memory now and the highest so far in this span, from the sampler's latest reading
    /// (no device is read). `None` when gpuspan is not installed or the span is disabled.
    pub fn memory(&self) -> Option<SpanMemory> {
        let tracking = self.tracking.as_ref()?;
        let shared = &*tracking.state.shared;
        let watermark = &*tracking.watermark;
        let now = |figure: usize| present(shared.latest(figure));
        let peak = |figure: usize| {
            [
                watermark.peak(figure),
                shared.latest(figure),
                watermark.start[figure],
            ]
            .into_iter()
            .filter(|&v| v != ABSENT)
            .max()
        };
        Some(SpanMemory {
            gpu_used: now(figure::GPU_USED),
            gpu_peak: peak(figure::GPU_USED),
            host_resident: now(figure::HOST_RSS),
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

fn present(value: u64) -> Option<u64> {
    (value != ABSENT).then_some(value)
}

impl Drop for MemorySpan {
    fn drop(&mut self) {
        if let Some(tracking) = self.tracking.take() {
            tracking.finish(&self.span);
        }
    }
}

impl Tracking {
    fn finish(self, span: &tracing::Span) {
        let shared = &*self.state.shared;
        let watermark = &*self.watermark;
        let figures = Figures { shared, watermark };
        let fields = self.fields;

        // Sums whose start and end cover different devices (one fell off meanwhile) would
        // read as memory freed or taken: leave them out.
        let same_devices = watermark.start_failing == shared.failing();
        let sum = |figure| figures.get(figure).filter(|_| same_devices);
        let [gpu_start, gpu_end, gpu_peak, gpu_delta] = match sum(figure::GPU_USED) {
            Some((start, end, peak)) => {
                let (start, end) = (bytes(start), bytes(end));
                [Some(start), Some(end), Some(bytes(peak)), Some(end - start)]
            }
            None => [None; 4],
        };
        let [process_start, process_end, process_peak] = triple(sum(figure::PROCESS_GPU));
        let [host_start, host_end, host_peak] = triple(figures.get(figure::HOST_RSS));
        let allocated = figures.pushed_peak(figure::ALLOCATED).map(bytes);
        let reserved = figures.pushed_peak(figure::RESERVED).map(bytes);
        let imbalance = self.record_devices(span);
        let source = shared.source_name();
        let samples = bytes(watermark.samples());
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
            (&fields.source, Some(&source as &dyn Value)),
            (&fields.samples, Some(&samples as &dyn Value)),
        ];
        if let Some(metadata) = span.metadata() {
            span.record_all(&metadata.fields().value_set(&values));
        }

        let errors = watermark.errors();
        let error = if std::thread::panicking() {
            Some("panicked while the span was open".to_owned())
        } else {
            (errors != 0).then(|| shared.describe_errors(errors))
        };
        if let Some(message) = &error {
            span.set_status(Status::error(message.clone()));
        }

        let seconds = self.opened.elapsed().as_secs_f64();
        let state = &*self.state;
        match self.role {
            SpanRole::Step => {
                state.steps_closed.fetch_add(1, Ordering::Relaxed);
                for histogram in &state.step_duration {
                    histogram.record(seconds, &[]);
                }
            }
            SpanRole::Epoch(epoch) => {
                for histogram in &state.epoch_duration {
                    histogram.record(seconds, &[]);
                }
                let memory = |[start, end, peak]: [Option<i64>; 3]| {
                    Some(Memory {
                        start: start?,
                        peak: peak?,
                        end: end?,
                    })
                };
                let row = EpochSummary {
                    epoch,
                    seconds,
                    steps: (state.steps_closed.load(Ordering::Relaxed) - self.steps_at_open)
                        as usize,
                    gpu: memory([gpu_start, gpu_end, gpu_peak]),
                    process_gpu_peak: process_peak,
                    host: memory([host_start, host_end, host_peak]),
                    error,
                };
                if let Ok(mut epochs) = state.epochs.lock() {
                    epochs.push(row);
                }
            }
            SpanRole::Other => {}
        }
    }

    /// With several devices in scope, records `gpu.<i>.memory.*` on the OTel span and
    /// returns the imbalance of the per-device peaks.
    fn record_devices(&self, span: &tracing::Span) -> Option<f64> {
        let shared = &*self.state.shared;
        let figures = Figures {
            shared,
            watermark: &self.watermark,
        };
        let devices = shared.devices();
        if devices.len() < 2 {
            return None;
        }
        let (mut lowest_peak, mut highest_peak) = (u64::MAX, 0u64);
        let mut attributes = Vec::with_capacity(devices.len() * 3);
        let mut complete = true;
        for i in 0..devices.len() {
            let figure = figure::DEVICE0 + i;
            let [start_key, end_key, peak_key] = shared.device_keys(i);
            match figures.get(figure) {
                Some((start, end, peak)) => {
                    attributes.push(KeyValue::new(start_key.clone(), bytes(start)));
                    attributes.push(KeyValue::new(end_key.clone(), bytes(end)));
                    attributes.push(KeyValue::new(peak_key.clone(), bytes(peak)));
                    lowest_peak = lowest_peak.min(peak);
                    highest_peak = highest_peak.max(peak);
                }
                None => {
                    // A device lost while the span was open: what was measured before it
                    // fell off is still true; there is no end to report.
                    complete = false;
                    if let Some((start, peak)) = figures.start_and_peak(figure) {
                        attributes.push(KeyValue::new(start_key.clone(), bytes(start)));
                        attributes.push(KeyValue::new(peak_key.clone(), bytes(peak)));
                    }
                }
            }
        }
        // One call onto the OTel span, rather than a subscriber lookup per attribute.
        span.context().span().set_attributes(attributes);
        // With every device's peak known (at least two of them), the imbalance of the peaks.
        (complete && highest_peak > 0)
            .then(|| (highest_peak - lowest_peak) as f64 / highest_peak as f64)
    }
}

fn triple(figure: Option<(u64, u64, u64)>) -> [Option<i64>; 3] {
    match figure {
        Some((start, end, peak)) => [Some(bytes(start)), Some(bytes(end)), Some(bytes(peak))],
        None => [None; 3],
    }
}

fn value<T: Value>(v: &Option<T>) -> Option<&dyn Value> {
    v.as_ref().map(|v| v as &dyn Value)
}

/// Start, end and peak of one figure over a span.
struct Figures<'a> {
    shared: &'a crate::sampler::Shared,
    watermark: &'a Watermark,
}

impl Figures<'_> {
    /// A sampled figure: `None` unless it was measured at both ends of the span.
    fn get(&self, figure: usize) -> Option<(u64, u64, u64)> {
        let start = self.watermark.start[figure];
        let end = self.shared.latest(figure);
        if start == ABSENT || end == ABSENT {
            return None;
        }
        let peak = match self.watermark.peak(figure) {
            ABSENT => start.max(end),
            peak => peak.max(start).max(end),
        };
        Some((start, end, peak))
    }

    /// Start and peak of a figure whose end was not measured.
    fn start_and_peak(&self, figure: usize) -> Option<(u64, u64)> {
        let start = self.watermark.start[figure];
        if start == ABSENT {
            return None;
        }
        match self.watermark.peak(figure) {
            ABSENT => Some((start, start)),
            peak => Some((start, peak.max(start))),
        }
    }

    /// A pushed counter: the highest value pushed while the span was open, or the value
    /// standing when it opened. `None` if nothing was ever pushed.
    fn pushed_peak(&self, figure: usize) -> Option<u64> {
        match self.watermark.peak(figure) {
            ABSENT => None,
            peak => Some(peak),
        }
    }
}

/// Byte counts are OTel integers: i64 (tracing-opentelemetry turns a u64 into a string).
fn bytes(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

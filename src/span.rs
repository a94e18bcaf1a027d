//! The guard returned by `epoch_span!`, `step_span!` and `memory_span!`: it keeps the span
//! entered and, when dropped, records the memory attributes on it before it closes.

use std::sync::Arc;
use std::time::Instant;

use opentelemetry::trace::Status;
use tracing::span::EnteredSpan;
use tracing_opentelemetry::OpenTelemetrySpanExt;

use crate::layer::{current, LayerState};
use crate::sampler::{figure, Watermark, ABSENT};

/// What a span stands for, which decides the duration histogram it feeds.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpanRole {
    /// `epoch_span!`: feeds `ml.epoch.duration`.
    Epoch,
    /// `step_span!`: feeds `ml.step.duration`.
    Step,
    /// `memory_span!`: memory attributes only.
    Other,
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
    state: Arc<LayerState>,
    watermark: Arc<Watermark>,
    role: SpanRole,
    opened: Instant,
}

impl MemorySpan {
    /// Enters `span` and starts tracking memory for it. Used by the macros.
    #[doc(hidden)]
    pub fn enter(span: tracing::Span, role: SpanRole) -> Self {
        let tracking = if span.is_disabled() {
            None
        } else {
            current().map(|state| Tracking {
                watermark: state.shared.open_watermark(),
                state,
                role,
                opened: Instant::now(),
            })
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
            if std::thread::panicking() {
                self.span
                    .set_status(Status::error("panicked while the span was open"));
            }
        }
    }
}

impl Tracking {
    fn finish(self, span: &tracing::Span) {
        let shared = &*self.state.shared;
        let watermark = &*self.watermark;
        let figures = Figures { shared, watermark };

        if let Some((start, end, peak)) = figures.get(figure::GPU_USED) {
            span.record("gpu.memory.start", bytes(start));
            span.record("gpu.memory.end", bytes(end));
            span.record("gpu.memory.peak", bytes(peak));
            span.record("gpu.memory.delta", bytes(end) - bytes(start));
        }
        if let Some((start, end, peak)) = figures.get(figure::PROCESS_GPU) {
            span.record("gpu.process.memory.start", bytes(start));
            span.record("gpu.process.memory.end", bytes(end));
            span.record("gpu.process.memory.peak", bytes(peak));
        }
        if let Some(peak) = figures.pushed_peak(figure::ALLOCATED) {
            span.record("gpu.allocator.allocated.peak", bytes(peak));
        }
        if let Some(peak) = figures.pushed_peak(figure::RESERVED) {
            span.record("gpu.allocator.reserved.peak", bytes(peak));
        }
        if let Some((start, end, peak)) = figures.get(figure::HOST_RSS) {
            span.record("process.memory.start", bytes(start));
            span.record("process.memory.end", bytes(end));
            span.record("process.memory.peak", bytes(peak));
        }
        span.record("gpu.memory.source", shared.source_name());
        span.record("gpu.memory.samples", bytes(watermark.samples()));

        let devices = shared.devices();
        if devices.len() > 1 {
            let mut peaks = Vec::with_capacity(devices.len());
            for (i, device) in devices.iter().enumerate() {
                let Some((start, end, peak)) = figures.get(figure::DEVICE0 + i) else {
                    continue;
                };
                let prefix = format!("gpu.{}.memory", device.index);
                span.set_attribute(format!("{prefix}.start"), bytes(start));
                span.set_attribute(format!("{prefix}.end"), bytes(end));
                span.set_attribute(format!("{prefix}.peak"), bytes(peak));
                peaks.push(peak);
            }
            let max = peaks.iter().copied().max().unwrap_or(0);
            let min = peaks.iter().copied().min().unwrap_or(0);
            if peaks.len() > 1 && max > 0 {
                span.record("gpu.memory.imbalance", (max - min) as f64 / max as f64);
            }
        }
        let errors = watermark.errors();
        if errors != 0 {
            span.set_status(Status::error(shared.describe_errors(errors)));
        }

        let seconds = self.opened.elapsed().as_secs_f64();
        let histograms = match self.role {
            SpanRole::Step => &self.state.step_duration[..],
            SpanRole::Epoch => &self.state.epoch_duration[..],
            SpanRole::Other => &[],
        };
        for histogram in histograms {
            histogram.record(seconds, &[]);
        }
    }
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

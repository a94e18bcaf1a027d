//! The guard returned by `epoch_span!`, `step_span!` and `memory_span!`: it keeps the span
//! entered and, when dropped, measures the span's memory ([`SpanFigures`]) before it closes.
//!
//! The figures leave by one route: recorded as the span's tracing fields for every
//! subscriber, and handed with the closing span to the export thread, which makes them OTel
//! attributes (see `layer.rs`). The training thread copies a few atomics and nothing more;
//! the power figures stay on the span's watermark, which goes to the export thread with it.

use std::sync::{Arc, OnceLock};

use tracing::field::{Field, Value};
use tracing::span::EnteredSpan;

use crate::figures::{Number, Reading, SpanFigures, Triple, Watermark, TRACED};
use crate::layer::{current, Ending, LayerState};
use crate::sampler::{figure, Shared};

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

/// Handles of the fields the macros declare: one per row of the attribute table.
#[derive(Debug)]
struct MemoryFields([Field; TRACED.len()]);

impl MemoryFields {
    fn find(fields: &tracing::field::FieldSet) -> Option<Self> {
        let mut found = Vec::with_capacity(TRACED.len());
        for column in &TRACED {
            found.push(fields.field(column.key)?);
        }
        found.try_into().ok().map(Self)
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

    /// Closes the span without exporting it: for a span opened ahead of work that never
    /// came (a program's step after its last optimizer step), which would otherwise be
    /// exported as a step that did nothing.
    ///
    /// The span stops being current, its memory stops being tracked, and it closes now (or
    /// when the last clone of it is dropped), so the span it was opened in ends and is
    /// exported as usual. A span still open inside it is not exported either when it
    /// closes: it belongs to the abandoned work. Other subscribers see the span close,
    /// without memory fields.
    pub fn abandon(mut self) {
        if let Some(tracking) = self.tracking.take() {
            tracking.state.shared.close_watermark(tracking.watermark);
        }
        if let Some(entered) = self.span.take() {
            crate::layer::hand_over(entered, Ending::Abandoned);
        }
    }

    /// Memory now and the highest so far in this span, from the sampler's latest reading
    /// (no device is read). `None` when gpuspan is not installed or the span is disabled.
    pub fn memory(&self) -> Option<SpanMemory> {
        let tracking = self.tracking.as_ref()?;
        let shared = &*tracking.state.shared;
        let watermark = &*tracking.watermark;
        let peak = |figure: usize| watermark.peak(figure).max(shared.reading(figure)).get();
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
                let Tracking {
                    fields,
                    state,
                    watermark,
                } = tracking;
                let mut figures = measure(&state.shared, &watermark);
                figures.power = state.shared.finish_watermark(watermark);
                record_fields(&figures, fields, &span);
                crate::layer::hand_over(span, Ending::Measured(figures));
            }
            None => drop(span),
        }
    }
}

/// Reads the span's figures: start from the watermark, end from the latest reading,
/// peak the highest of both and every sample between.
fn measure(shared: &Arc<Shared>, watermark: &Watermark) -> SpanFigures {
    let triple = |figure: usize| {
        let (start, end) = (watermark.start(figure), shared.reading(figure));
        (start.is_some() && end.is_some())
            .then(|| Triple::of(start, end, watermark.peak(figure).max(start).max(end)))
    };
    // Sums whose start and end cover different devices (one fell off meanwhile) would
    // read as memory freed or taken: leave them out.
    let same_devices = watermark.start_failing() == shared.failing();
    let sum = |figure: usize| triple(figure).filter(|_| same_devices).unwrap_or_default();
    let devices = if shared.devices().len() > 1 {
        (0..shared.devices().len())
            .map(|i| {
                let figure = figure::DEVICE0 + i;
                // A device lost meanwhile keeps its start and the peak it reached.
                triple(figure).unwrap_or_else(|| {
                    let start = watermark.start(figure);
                    let peak = if start.is_some() {
                        watermark.peak(figure).max(start)
                    } else {
                        Reading::NONE
                    };
                    Triple::of(start, Reading::NONE, peak)
                })
            })
            .collect()
    } else {
        Vec::new()
    };
    // The coarsest a resolution was while the span was open.
    let widest = |figure: usize| watermark.peak(figure).max(shared.reading(figure)).get();
    let errors = watermark.errors();
    let error = if std::thread::panicking() {
        Some("panicked while the span was open".to_owned())
    } else {
        (errors != 0).then(|| shared.describe_errors(errors))
    };
    SpanFigures {
        gpu: sum(figure::GPU_USED),
        process_gpu: sum(figure::PROCESS_GPU),
        host: triple(figure::HOST_RSS).unwrap_or_default(),
        allocated_peak: watermark.peak(figure::ALLOCATED),
        reserved_peak: watermark.peak(figure::RESERVED),
        devices,
        samples: Some(watermark.samples()),
        resolution_ns: widest(figure::GPU_RESOLUTION),
        process_resolution_ns: widest(figure::PROCESS_RESOLUTION),
        error,
        power: Default::default(),
    }
}

/// Records the figures as the span's tracing fields, for every subscriber but the OTel
/// layer (which gets them from the export thread).
fn record_fields(figures: &SpanFigures, fields: &MemoryFields, span: &tracing::Span) {
    let Some(metadata) = span.metadata() else {
        return;
    };
    let numbers = TRACED.map(|column| (column.read)(figures));
    let values: [(&Field, Option<&dyn Value>); TRACED.len()] =
        std::array::from_fn(|i| (&fields.0[i], numbers[i].as_ref().map(Number::as_field)));
    crate::layer::record_memory_fields(|| {
        span.record_all(&metadata.fields().value_set(&values));
    });
}

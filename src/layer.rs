//! The tracing layer gpuspan installs: tracing-opentelemetry's layer, plus the state that
//! spans and counters find in the subscriber they run in (no global), plus the hand-off of a
//! closing span's memory figures to the export queue.
//!
//! A closing span's figures take one route out. The guard records them as tracing fields
//! (so `fmt` and every other subscriber see them), and hands the same typed figures to the
//! span processor through [`closing`]; the export thread turns them into OTel attributes.
//! tracing-opentelemetry is not given that one `record` call: building 15 attributes
//! through its per-field visitor and the SDK span's lock, on the training thread, was most
//! of a step's cost.
//!
//! Every other field reaches tracing-opentelemetry, with unsigned numbers made integers
//! first (see `unsigned`).
//!
//! A guard may instead abandon its span ([`Ending::Abandoned`]): the span closes as any
//! other, and while it ends the span processor is told ([`discarding`]) to drop it, and
//! every span still open inside it when they close.

mod allocator;
mod unsigned;

pub use allocator::record_allocator;

use std::any::TypeId;
use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use opentelemetry_sdk::trace::SdkTracer;
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata, Subscriber};
use tracing_core::subscriber::Interest;
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

use crate::figures::SpanFigures;
use crate::sampler::Shared;

/// What an open span needs from the subscriber it runs in.
#[derive(Debug)]
pub(crate) struct LayerState {
    pub(crate) shared: Arc<Shared>,
}

/// Handle found by [`current`] through `downcast_raw`.
#[derive(Debug, Clone)]
pub(crate) struct StateHandle(pub(crate) Arc<LayerState>);

/// tracing-opentelemetry's layer with gpuspan's state and figure hand-off.
pub(crate) struct GpuspanLayer<S> {
    otel: tracing_opentelemetry::OpenTelemetryLayer<S, SdkTracer>,
    state: StateHandle,
}

impl<S> GpuspanLayer<S>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    pub(crate) fn new(tracer: SdkTracer, state: Arc<LayerState>) -> Self {
        Self {
            otel: tracing_opentelemetry::layer()
                .with_tracer(tracer)
                .with_threads(false)
                .with_tracked_inactivity(false),
            state: StateHandle(state),
        }
    }
}

/// How a guard leaves its span.
// Boxing the figures would allocate on the training thread for every span.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub(crate) enum Ending {
    /// Measured: the figures go to the span processor with the closing span.
    Measured(SpanFigures),
    /// Abandoned: the span, and any span still open inside it, is not exported.
    Abandoned,
}

thread_local! {
    /// Set while the guard records the memory fields: the OTel layer skips that record.
    static RECORDING_MEMORY: Cell<bool> = const { Cell::new(false) };
    /// Endings of spans whose guard dropped on this thread, waiting for their close.
    static WAITING: RefCell<Vec<(Id, Ending)>> = const { RefCell::new(Vec::new()) };
    /// Figures of the span closing now on this thread, for the span processor's `on_end`.
    static CLOSING: RefCell<Option<SpanFigures>> = const { RefCell::new(None) };
    /// Set while an abandoned span (or one inside it) closes: the span processor drops it.
    static DISCARDING: Cell<bool> = const { Cell::new(false) };
}

/// Runs `record` (the guard's `record_all` of the memory fields) without the OTel layer.
pub(crate) fn record_memory_fields(record: impl FnOnce()) {
    let _ = RECORDING_MEMORY.try_with(|flag| flag.set(true));
    record();
    let _ = RECORDING_MEMORY.try_with(|flag| flag.set(false));
}

/// Spans whose ending waits in their extensions (closed later, possibly elsewhere).
static PARKED: AtomicUsize = AtomicUsize::new(0);
/// Of those, the abandoned ones: while there are any, a closing span looks for one among
/// its parents (a span open inside an abandoned one keeps it open until it closes).
static PARKED_ABANDONED: AtomicUsize = AtomicUsize::new(0);

/// An ending parked in a span's extensions; counted in [`PARKED`] until dropped, whether
/// taken by the close or cleared with a span that closed without it.
struct Parked {
    ending: Option<Ending>,
    abandoned: bool,
}

impl Parked {
    fn new(ending: Ending) -> Self {
        let abandoned = matches!(ending, Ending::Abandoned);
        PARKED.fetch_add(1, Ordering::Relaxed);
        if abandoned {
            PARKED_ABANDONED.fetch_add(1, Ordering::Relaxed);
        }
        Self {
            ending: Some(ending),
            abandoned,
        }
    }
}

impl Drop for Parked {
    fn drop(&mut self) {
        PARKED.fetch_sub(1, Ordering::Relaxed);
        if self.abandoned {
            PARKED_ABANDONED.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// Exits and drops the guard's span, handing its ending to the close. The close usually
/// happens right here; when a clone of the span (or a span opened inside it) is still
/// alive it comes later, maybe on another thread, and the ending waits in the span's
/// extensions until then.
///
/// The registry reuses a closed span's id for a new span, and the clone may close the span
/// elsewhere between the drop here and the parking. So the span's slot in the registry is
/// held from before the drop until the ending is parked: while it is held, no new span
/// can get the id, and an ending parked after a close elsewhere is freed with the slot
/// instead of landing on another span.
pub(crate) fn hand_over(span: tracing::span::EnteredSpan, ending: Ending) {
    let span = span.exit();
    let Some(id) = span.id() else { return };
    let Some(dispatch) = span.with_subscriber(|(_, dispatch)| dispatch.clone()) else {
        return;
    };
    let held = dispatch
        .downcast_ref::<tracing_subscriber::Registry>()
        .and_then(|registry| registry.span_data(&id));
    // `try_with`: a guard dropped while the thread's locals are torn down must not panic.
    let _ = WAITING.try_with(|waiting| waiting.borrow_mut().push((id.clone(), ending)));
    drop(span);
    if let Some(ending) = take_waiting(&id) {
        // Not closed here: park the ending with the span itself.
        if let Some(data) = &held {
            use tracing_subscriber::registry::SpanData as _;
            data.extensions_mut().insert(Parked::new(ending));
        }
    }
    // A span that closed meanwhile is freed now, with whatever was parked in it.
    drop(held);
}

/// The figures of the span whose `on_end` is running, if gpuspan measured it.
pub(crate) fn closing() -> Option<SpanFigures> {
    CLOSING
        .try_with(|closing| closing.borrow_mut().take())
        .ok()
        .flatten()
}

/// Whether the span whose `on_end` is running was abandoned, or closed inside an abandoned
/// span: the span processor drops it.
pub(crate) fn discarding() -> bool {
    DISCARDING.try_with(Cell::get).unwrap_or(false)
}

fn take_waiting(id: &Id) -> Option<Ending> {
    WAITING
        .try_with(|waiting| {
            let mut waiting = waiting.borrow_mut();
            let position = waiting
                .iter()
                .rposition(|(waiting_id, _)| waiting_id == id)?;
            Some(waiting.swap_remove(position).1)
        })
        .ok()
        .flatten()
}

impl<S> Layer<S> for GpuspanLayer<S>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_register_dispatch(&self, subscriber: &tracing::Dispatch) {
        self.otel.on_register_dispatch(subscriber);
    }

    fn on_layer(&mut self, subscriber: &mut S) {
        self.otel.on_layer(subscriber);
    }

    fn register_callsite(&self, metadata: &'static Metadata<'static>) -> Interest {
        self.otel.register_callsite(metadata)
    }

    fn enabled(&self, metadata: &Metadata<'_>, ctx: Context<'_, S>) -> bool {
        self.otel.enabled(metadata, ctx)
    }

    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        if unsigned::has_unsigned(|visitor| attrs.record(visitor)) {
            let metadata = attrs.metadata();
            let replayed = unsigned::replay(
                metadata.fields(),
                |visitor| attrs.record(visitor),
                |values| {
                    let attrs = match attrs.parent() {
                        _ if attrs.is_root() => Attributes::new_root(metadata, values),
                        Some(parent) => Attributes::child_of(parent.clone(), metadata, values),
                        None => Attributes::new(metadata, values),
                    };
                    self.otel.on_new_span(&attrs, id, ctx.clone());
                },
            );
            if replayed.is_some() {
                return;
            }
        }
        self.otel.on_new_span(attrs, id, ctx);
    }

    fn on_record(&self, span: &Id, values: &Record<'_>, ctx: Context<'_, S>) {
        if RECORDING_MEMORY.try_with(Cell::get).unwrap_or(false) {
            return;
        }
        if unsigned::has_unsigned(|visitor| values.record(visitor)) {
            let fields = ctx.metadata(span).map(|metadata| metadata.fields());
            let replayed = fields.and_then(|fields| {
                unsigned::replay(
                    fields,
                    |visitor| values.record(visitor),
                    |replayed| {
                        self.otel
                            .on_record(span, &Record::new(replayed), ctx.clone())
                    },
                )
            });
            if replayed.is_some() {
                return;
            }
        }
        self.otel.on_record(span, values, ctx);
    }

    fn on_follows_from(&self, span: &Id, follows: &Id, ctx: Context<'_, S>) {
        self.otel.on_follows_from(span, follows, ctx);
    }

    fn event_enabled(&self, event: &Event<'_>, ctx: Context<'_, S>) -> bool {
        self.otel.event_enabled(event, ctx)
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        self.otel.on_event(event, ctx);
    }

    fn on_enter(&self, id: &Id, ctx: Context<'_, S>) {
        self.otel.on_enter(id, ctx);
    }

    fn on_exit(&self, id: &Id, ctx: Context<'_, S>) {
        self.otel.on_exit(id, ctx);
    }

    fn on_close(&self, id: Id, ctx: Context<'_, S>) {
        let mut ending = take_waiting(&id);
        if ending.is_none() && PARKED.load(Ordering::Relaxed) > 0 {
            if let Some(span) = ctx.span(&id) {
                ending = span
                    .extensions_mut()
                    .remove::<Parked>()
                    .and_then(|mut parked| parked.ending.take());
            }
        }
        if matches!(ending, Some(Ending::Abandoned)) || inside_abandoned(&id, &ctx) {
            return self.discard(id, ctx);
        }
        let figures = match ending {
            Some(Ending::Measured(figures)) => Some(figures),
            _ => None,
        };
        let measured = figures.is_some();
        if measured {
            let _ = CLOSING.try_with(|closing| *closing.borrow_mut() = figures);
        }
        // Ends the OTel span: the span processor's `on_end` runs inside, on this thread.
        self.otel.on_close(id, ctx);
        if measured {
            let _ = CLOSING.try_with(|closing| closing.borrow_mut().take());
        }
    }

    fn on_id_change(&self, old: &Id, new: &Id, ctx: Context<'_, S>) {
        self.otel.on_id_change(old, new, ctx);
    }

    unsafe fn downcast_raw(&self, id: TypeId) -> Option<*const ()> {
        if id == TypeId::of::<Self>() {
            return Some(self as *const Self as *const ());
        }
        if id == TypeId::of::<StateHandle>() {
            return Some(&self.state as *const StateHandle as *const ());
        }
        // SAFETY: forwarded to the inner layer, which upholds the same contract (its
        // `WithContext` lookup is what `OpenTelemetrySpanExt` relies on).
        unsafe { self.otel.downcast_raw(id) }
    }
}

impl<S> GpuspanLayer<S>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    /// Ends the OTel span as any other (which ends a started SDK span once, and frees what
    /// tracing-opentelemetry keeps), telling the span processor to drop it.
    fn discard(&self, id: Id, ctx: Context<'_, S>) {
        let _ = DISCARDING.try_with(|flag| flag.set(true));
        self.otel.on_close(id, ctx);
        let _ = DISCARDING.try_with(|flag| flag.set(false));
    }
}

/// Whether the span `id` was opened inside a span that was abandoned (which is still
/// open: a span's parent closes after it).
fn inside_abandoned<S>(id: &Id, ctx: &Context<'_, S>) -> bool
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    if PARKED_ABANDONED.load(Ordering::Relaxed) == 0 {
        return false;
    }
    let Some(span) = ctx.span(id) else {
        return false;
    };
    span.scope().skip(1).any(|parent| {
        parent
            .extensions()
            .get::<Parked>()
            .is_some_and(|parked| parked.abandoned)
    })
}

/// The current subscriber's gpuspan state, if it has a gpuspan layer.
pub(crate) fn current() -> Option<Arc<LayerState>> {
    tracing::dispatcher::get_default(|dispatch| {
        dispatch
            .downcast_ref::<StateHandle>()
            .map(|handle| Arc::clone(&handle.0))
    })
}

/// Runs `f` with the sampler state of the current subscriber, if it has a gpuspan layer.
pub(crate) fn with_current<R>(f: impl FnOnce(&Arc<Shared>) -> R) -> Option<R> {
    let state = current()?;
    Some(f(&state.shared))
}

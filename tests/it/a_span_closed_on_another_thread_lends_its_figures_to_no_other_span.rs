//! A step span whose clone outlives the guard closes where the clone is dropped, maybe on
//! another thread. The figures the guard measured then wait for that close; they must
//! reach that span or none, never a new span the registry gave the same id once the old
//! one closed.

use gpuspan_test_support as support;

use std::any::TypeId;
use std::cell::RefCell;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};

use support::receiver::Receiver;
use tracing::span::{Attributes, Id, Record};
use tracing::subscriber::Interest;
use tracing::{Dispatch, Event, Metadata, Subscriber};
use tracing_subscriber::layer::SubscriberExt;

/// What the test does when the guard's handle is dropped and the span stays open.
type Hook = Box<dyn FnOnce(&Id)>;

thread_local! {
    /// Runs inside the next `try_close` on this thread that leaves its span open.
    static WHEN_LEFT_OPEN: RefCell<Option<Hook>> = RefCell::new(None);
}

/// The subscriber under test, with a hook in `try_close`: the moment the guard's handle is
/// dropped while a clone keeps the span open, the test acts.
struct Hooked<S>(S);

impl<S: Subscriber> Subscriber for Hooked<S> {
    fn on_register_dispatch(&self, subscriber: &Dispatch) {
        self.0.on_register_dispatch(subscriber);
    }
    fn register_callsite(&self, metadata: &'static Metadata<'static>) -> Interest {
        self.0.register_callsite(metadata)
    }
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        self.0.enabled(metadata)
    }
    fn max_level_hint(&self) -> Option<tracing::level_filters::LevelFilter> {
        self.0.max_level_hint()
    }
    fn new_span(&self, attrs: &Attributes<'_>) -> Id {
        self.0.new_span(attrs)
    }
    fn record(&self, span: &Id, values: &Record<'_>) {
        self.0.record(span, values);
    }
    fn record_follows_from(&self, span: &Id, follows: &Id) {
        self.0.record_follows_from(span, follows);
    }
    fn event_enabled(&self, event: &Event<'_>) -> bool {
        self.0.event_enabled(event)
    }
    fn event(&self, event: &Event<'_>) {
        self.0.event(event);
    }
    fn enter(&self, span: &Id) {
        self.0.enter(span);
    }
    fn exit(&self, span: &Id) {
        self.0.exit(span);
    }
    fn clone_span(&self, id: &Id) -> Id {
        self.0.clone_span(id)
    }
    fn try_close(&self, id: Id) -> bool {
        let closed = self.0.try_close(id.clone());
        if !closed {
            if let Some(hook) = WHEN_LEFT_OPEN.with(|hook| hook.borrow_mut().take()) {
                hook(&id);
            }
        }
        closed
    }
    fn current_span(&self) -> tracing_core::span::Current {
        self.0.current_span()
    }
    unsafe fn downcast_raw(&self, id: TypeId) -> Option<*const ()> {
        if id == TypeId::of::<Self>() {
            return Some(self as *const Self as *const ());
        }
        // SAFETY: forwarded to the wrapped subscriber, which upholds the same contract.
        unsafe { self.0.downcast_raw(id) }
    }
}

/// More new spans than the registry's generations for one slot (8191 at most), so an id
/// that can be reused is.
const GENERATIONS: usize = 2 * 8192;
/// New spans held open at most to reach a slot: more than the thread's first pages hold.
const HELD: usize = 1024;

/// Opens `filler` spans on this thread until one gets `id`, and returns it; `None` when the
/// registry does not give `id` again.
///
/// The registry (a sharded slab) makes an id of a slot and that slot's generation, and
/// reuses the slot freed last on the thread first. So: find the generation's unit from two
/// spans in a row in one slot, hold new spans until one lands in `id`'s slot, then close
/// and reopen spans in that slot until its generation comes round to `id`'s.
fn span_with_id(id: &Id) -> Option<tracing::Span> {
    let open = || tracing::info_span!("filler");
    let raw = |span: &tracing::Span| span.id().expect("an enabled span").into_u64() - 1;
    let first = raw(&open());
    let generation = raw(&open()).wrapping_sub(first);
    assert!(generation.is_power_of_two(), "{first} then {generation}");
    let slot = |raw: u64| raw & (generation - 1);
    let wanted = id.into_u64() - 1;
    let mut held = Vec::new();
    let mut span = open();
    while slot(raw(&span)) != slot(wanted) {
        if held.len() == HELD {
            return None;
        }
        held.push(span);
        span = open();
    }
    for _ in 0..GENERATIONS {
        if raw(&span) == wanted {
            return Some(span);
        }
        drop(span);
        span = open();
    }
    None
}

#[test]
fn a_clone_closed_elsewhere_while_its_id_is_reused_leaves_the_new_span_bare() {
    let receiver = Receiver::start_grpc();
    let telemetry = support::setup::to_receiver(&receiver)
        .build()
        .expect("gpuspan builds");
    let dispatch = Dispatch::new(Hooked(
        tracing_subscriber::registry().with(telemetry.layer()),
    ));

    // Thread B drops the clone it is sent, closing the step span there.
    let (send_clone, clones) = mpsc::channel::<tracing::Span>();
    let (send_closed, closed) = mpsc::channel::<()>();
    let b = std::thread::spawn(move || {
        for clone in clones {
            drop(clone);
            send_closed.send(()).unwrap();
        }
    });

    // Thread A, fresh, so that the registry's slots it frees are the ones it reuses.
    let reused = std::thread::spawn(move || {
        tracing::dispatcher::with_default(&dispatch, || {
            let step = gpuspan::step_span!(0);
            let clone = step.span().clone();
            let new_span = Arc::new(Mutex::new(None::<tracing::Span>));
            let keep = Arc::clone(&new_span);
            WHEN_LEFT_OPEN.with(|hook| {
                *hook.borrow_mut() = Some(Box::new(move |id: &Id| {
                    // The guard's handle is gone; the clone closes the span on thread B,
                    // then new spans come until one gets the closed span's id, if any can.
                    send_clone.send(clone).unwrap();
                    closed.recv().unwrap();
                    *keep.lock().unwrap() = span_with_id(id);
                }));
            });
            drop(step);
            let new_span = new_span.lock().unwrap().take();
            let reused = new_span.is_some();
            drop(new_span);
            reused
        })
    })
    .join()
    .expect("thread A");
    b.join().expect("thread B");
    telemetry.shutdown().expect("delivered");

    assert_eq!(receiver.spans_named("step").len(), 1);
    let fillers = receiver.spans_named("filler");
    assert!(!fillers.is_empty());
    let lent: Vec<_> = fillers
        .iter()
        .filter(|span| {
            span.attributes
                .keys()
                .any(|k| k.starts_with("process.memory."))
        })
        .collect();
    assert!(
        lent.is_empty(),
        "the step's figures went to a new span that reused its id (reused: {reused}): {:?}",
        lent[0].attributes
    );
}

#[test]
fn a_clone_closed_on_another_thread_later_gets_the_figures() {
    let receiver = Receiver::start_grpc();
    let builder = support::setup::to_receiver(&receiver);
    let (telemetry, clone) = support::setup::run(builder, |_| {
        let step = gpuspan::step_span!(0);
        let clone = step.span().clone();
        drop(step);
        clone
    });
    std::thread::spawn(move || drop(clone))
        .join()
        .expect("the clone's thread");
    telemetry.shutdown().expect("delivered");
    let steps = receiver.spans_named("step");
    assert_eq!(steps.len(), 1);
    assert!(
        steps[0].int_attr("process.memory.peak").is_some(),
        "{:?}",
        steps[0].attributes
    );
}

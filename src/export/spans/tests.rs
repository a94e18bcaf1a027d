//! Tests of the span processor: a flood, a slow or refusing destination, flushes racing a
//! shutdown, and a tap that panics, each against the queue's bounds.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use opentelemetry::trace::{SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId};
use opentelemetry::InstrumentationScope;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanExporter, SpanLinks, SpanProcessor};

use super::{QueueConfig, QueueProcessor};
use crate::export::health::ExportHealth;
use crate::export::queue::{most_in_flight, Transport};
use crate::export::tap::SpanTap;
use crate::export::testing;
use crate::record::SpanRecord;

fn span(i: u64) -> SpanData {
    SpanData {
        span_context: SpanContext::new(
            TraceId::from(1_u128),
            SpanId::from(i + 1),
            TraceFlags::SAMPLED,
            false,
            Default::default(),
        ),
        parent_span_id: SpanId::INVALID,
        parent_span_is_remote: false,
        span_kind: SpanKind::Internal,
        name: "step".into(),
        start_time: SystemTime::now(),
        end_time: SystemTime::now(),
        attributes: vec![opentelemetry::KeyValue::new("ml.step", i as i64)],
        dropped_attributes_count: 0,
        events: SpanEvents::default(),
        links: SpanLinks::default(),
        status: Status::Unset,
        instrumentation_scope: InstrumentationScope::builder("test").build(),
    }
}

/// A destination that takes `pause` per export and counts what it got, or refuses.
#[derive(Debug, Clone)]
struct Destination {
    pause: Duration,
    refuse: bool,
    got: Arc<AtomicU64>,
}

impl SpanExporter for Destination {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        std::thread::sleep(self.pause);
        if self.refuse {
            return Err(OTelSdkError::InternalFailure("connection refused".into()));
        }
        self.got.fetch_add(batch.len() as u64, Ordering::Relaxed);
        Ok(())
    }
}

/// Makes the export thread slower per span than the producer, so its channel never
/// runs dry while the flood lasts.
struct SlowTap;

impl SpanTap for SlowTap {
    fn on_span(&mut self, _span: &mut SpanData, _record: &SpanRecord) {
        let until = Instant::now() + Duration::from_micros(20);
        while Instant::now() < until {
            std::hint::spin_loop();
        }
    }
}

fn no_devices() -> Arc<crate::sampler::Shared> {
    Arc::new(crate::sampler::Shared::new(
        "none".into(),
        Vec::new(),
        Duration::from_millis(5),
    ))
}

fn config(capacity: usize) -> QueueConfig {
    QueueConfig {
        capacity,
        batch: 64,
        ..QueueConfig::default()
    }
}

/// Offers spans as fast as the thread goes for `time`; returns how many.
fn flood(processor: &QueueProcessor, time: Duration) -> u64 {
    let start = Instant::now();
    let mut produced = 0;
    while start.elapsed() < time {
        processor.on_end(span(produced));
        produced += 1;
    }
    produced
}

#[test]
fn a_flood_of_spans_does_not_hold_back_the_exports() {
    let (destination, got) = destination(Duration::from_millis(1), false);
    let (processor, health) = start(
        Transport::Local(destination),
        20_000,
        vec![Box::new(SlowTap)],
        Duration::from_secs(30),
    );
    let produced = flood(&processor, Duration::from_millis(400));
    let during = got.load(Ordering::Relaxed);
    assert!(
        processor.backlog().len() > 0,
        "the flood must outrun the export thread for this test to mean anything"
    );
    assert!(
        during >= 64,
        "spans were delivered during the flood ({during} of {produced}): exports must \
         not wait for the channel to run dry"
    );
    processor
        .shutdown_with_timeout(Duration::from_secs(30))
        .expect("shutdown");
    let counts = health.counts();
    assert_eq!(counts.produced, produced);
    assert_eq!(counts.delivered + counts.lost, produced);
    assert_eq!(got.load(Ordering::Relaxed), counts.delivered);
}

#[test]
fn a_full_queue_says_whether_the_destination_was_slow_or_down() {
    for refuse in [false, true] {
        let (_runtime, processor, health, got) = remote_within(
            Duration::from_millis(20),
            refuse,
            200,
            Vec::new(),
            Duration::from_millis(200),
        );
        let produced = flood(&processor, Duration::from_millis(300));
        // Read before shutdown, whose own losses have their own reason.
        let reason = health.last_error().unwrap_or_default();
        // What a span given up now would be counted as.
        let overflow = health.overflow_reason();
        let _ = processor.shutdown_with_timeout(Duration::from_millis(200));
        let counts = health.counts();
        assert!(
            counts.lost > 0,
            "a 200-span queue under a flood loses spans"
        );
        assert_eq!(counts.produced, produced);
        assert_eq!(counts.delivered + counts.lost, produced);
        assert_eq!(got.load(Ordering::Relaxed), counts.delivered);
        if refuse {
            assert!(
                overflow.contains("unreachable"),
                "a refusing destination: {overflow:?}"
            );
            assert!(
                reason.contains("unreachable") || reason.contains("connection refused"),
                "a refusing destination: {reason:?}"
            );
        } else {
            assert!(overflow.contains("came faster"), "{overflow:?}");
            assert!(
                reason.contains("came faster than the destination took them"),
                "a slow destination is not an unreachable one: {reason:?}"
            );
            assert!(counts.delivered > 0);
        }
    }
}

/// A destination that takes `pause` per export (or refuses), and what it got.
fn destination(pause: Duration, refuse: bool) -> (Destination, Arc<AtomicU64>) {
    let got = Arc::new(AtomicU64::new(0));
    let destination = Destination {
        pause,
        refuse,
        got: Arc::clone(&got),
    };
    (destination, got)
}

/// A queue of `capacity` spans in front of `transport`, whose flushes give up after
/// `timeout`.
fn start(
    transport: Transport<Destination>,
    capacity: usize,
    taps: Vec<Box<dyn SpanTap>>,
    timeout: Duration,
) -> (QueueProcessor, Arc<ExportHealth>) {
    let health = testing::health();
    let processor = QueueProcessor::start(
        transport,
        config(capacity),
        Arc::clone(&health),
        taps,
        timeout,
        no_devices(),
    )
    .expect("the export thread starts");
    (processor, health)
}

type Remote = (
    tokio::runtime::Runtime,
    QueueProcessor,
    Arc<ExportHealth>,
    Arc<AtomicU64>,
);

/// A queue in front of a destination on a runtime; see [`destination`] and [`start`].
fn remote_within(
    pause: Duration,
    refuse: bool,
    capacity: usize,
    taps: Vec<Box<dyn SpanTap>>,
    timeout: Duration,
) -> Remote {
    let runtime = testing::runtime();
    let (destination, got) = destination(pause, refuse);
    let transport = Transport::Remote(Arc::new(destination), runtime.handle().clone());
    let (processor, health) = start(transport, capacity, taps, timeout);
    (runtime, processor, health, got)
}

/// [`remote_within`] with flushes that wait up to 30 s.
fn remote(pause: Duration, refuse: bool, capacity: usize, taps: Vec<Box<dyn SpanTap>>) -> Remote {
    remote_within(pause, refuse, capacity, taps, Duration::from_secs(30))
}

/// [`remote`] with room for 10,000 spans and no taps, holding spans `0..spans`.
fn remote_holding(pause: Duration, refuse: bool, spans: u64) -> Remote {
    let remote = remote(pause, refuse, 10_000, Vec::new());
    for i in 0..spans {
        remote.1.on_end(span(i));
    }
    remote
}

#[test]
fn a_shutdown_that_arrives_during_a_flush_waits_for_it_and_loses_nothing() {
    // 1,000 spans in requests of 256 that take 150 ms each: the flush takes about 600 ms.
    let (_runtime, processor, health, got) =
        remote_holding(Duration::from_millis(150), false, 1_000);
    std::thread::scope(|scope| {
        let flush = scope.spawn(|| processor.force_flush());
        std::thread::sleep(Duration::from_millis(100));
        let started = Instant::now();
        let shutdown = processor.shutdown_with_timeout(Duration::from_secs(30));
        assert!(
            shutdown.is_ok(),
            "the shutdown waits for the flush's drain: {shutdown:?}"
        );
        assert!(
            started.elapsed() >= Duration::from_millis(200),
            "the shutdown was answered before the spans were delivered"
        );
        let flush = flush.join().expect("the flush thread");
        assert!(flush.is_ok(), "{flush:?}");
    });
    let counts = health.counts();
    assert_eq!(counts.produced, 1_000);
    assert_eq!(counts.delivered, 1_000, "{counts:?}");
    assert_eq!(counts.lost, 0);
    assert_eq!(got.load(Ordering::Relaxed), 1_000);
}

#[test]
fn two_flushes_at_once_both_wait_for_every_span() {
    let (_runtime, processor, health, got) =
        remote_holding(Duration::from_millis(100), false, 1_000);
    std::thread::scope(|scope| {
        let first = scope.spawn(|| processor.force_flush());
        std::thread::sleep(Duration::from_millis(50));
        let second = processor.force_flush();
        assert!(second.is_ok(), "{second:?}");
        assert_eq!(
            got.load(Ordering::Relaxed),
            1_000,
            "the second flush returned before the spans were delivered"
        );
        let first = first.join().expect("the flush thread");
        assert!(first.is_ok(), "{first:?}");
    });
    processor
        .shutdown_with_timeout(Duration::from_secs(5))
        .expect("shutdown");
    assert_eq!(health.counts().delivered, 1_000);
}

#[test]
fn a_shutdown_with_a_shorter_timeout_than_a_running_flush_keeps_its_own_bound() {
    // Refused for ever: neither request can be satisfied; each ends at its own deadline.
    let (_runtime, processor, health, _got) = remote_holding(Duration::from_millis(5), true, 100);
    std::thread::scope(|scope| {
        let flush = scope.spawn(|| processor.force_flush());
        std::thread::sleep(Duration::from_millis(50));
        let started = Instant::now();
        let _ = processor.shutdown_with_timeout(Duration::from_millis(300));
        let took = started.elapsed();
        assert!(
            took >= Duration::from_millis(250) && took < Duration::from_secs(5),
            "the shutdown took {took:?} for a 300 ms bound"
        );
        // The flush is answered when the shutdown ends, not after its own 30 s.
        assert!(flush.join().expect("the flush thread").is_err());
    });
    let counts = health.counts();
    assert_eq!(counts.produced, 100);
    assert_eq!(counts.delivered + counts.lost, 100, "{counts:?}");
    assert_eq!(counts.lost, 100);
}

#[test]
fn the_queue_size_bounds_every_span_held_in_all() {
    // Every span carries one reference to `marker`, so the spans alive anywhere (the
    // channel, the buffer, an export in progress and its copy) are counted exactly.
    let marker: Arc<str> = Arc::from("marker");
    let capacity = 1_000;
    let batch = config(capacity).batch;
    let (_runtime, processor, health, _got) = remote(
        Duration::from_millis(20),
        true,
        capacity,
        vec![Box::new(SlowTap)],
    );
    let mut most = 0;
    let mut produced = 0;
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(400) {
        let mut data = span(produced);
        data.attributes.push(opentelemetry::KeyValue::new(
            "marker",
            opentelemetry::StringValue::from(Arc::clone(&marker)),
        ));
        processor.on_end(data);
        produced += 1;
        most = most.max(Arc::strong_count(&marker) - 1);
    }
    // The spans waiting, plus the request in progress and the exporter's copy of it.
    let bound = capacity + 2 * most_in_flight(&config(capacity));
    assert_eq!(most_in_flight(&config(capacity)), 4 * batch);
    assert!(
        most <= bound,
        "{most} spans were alive at once with a queue of {capacity} (bound {bound})"
    );
    assert!(
        most >= capacity / 2,
        "the queue never filled ({most}), so the bound was not tested"
    );
    let _ = processor.shutdown_with_timeout(Duration::from_millis(100));
    // On a busy machine the answer may come before the export thread has counted the
    // last spans (its taps are slow on purpose): wait for it, within a bound.
    let waited = Instant::now();
    while health.counts().pending() > 0 && waited.elapsed() < Duration::from_secs(20) {
        std::thread::sleep(Duration::from_millis(10));
    }
    let counts = health.counts();
    assert_eq!(counts.produced, produced);
    assert_eq!(counts.delivered + counts.lost, produced, "{counts:?}");
}

/// Panics on the `n`th span it sees.
struct PanicsOn(u64, u64);

impl SpanTap for PanicsOn {
    fn on_span(&mut self, _span: &mut SpanData, _record: &SpanRecord) {
        self.1 += 1;
        assert!(self.1 != self.0, "a tap bug on span {}", self.0);
    }
}

/// Counts what it sees.
struct Counts(Arc<AtomicU64>);

impl SpanTap for Counts {
    fn on_span(&mut self, _span: &mut SpanData, _record: &SpanRecord) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

#[test]
fn a_tap_that_panics_is_switched_off_and_every_span_is_still_exported() {
    let (destination, got) = destination(Duration::ZERO, false);
    let (before, after) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let (processor, health) = start(
        Transport::Local(destination),
        1000,
        vec![
            Box::new(Counts(Arc::clone(&before))),
            Box::new(PanicsOn(3, 0)),
            Box::new(Counts(Arc::clone(&after))),
        ],
        Duration::from_secs(30),
    );
    const SPANS: u64 = 10;
    for i in 0..SPANS {
        processor.on_end(span(i));
    }
    processor
        .force_flush()
        .expect("the export thread answers a flush");
    for i in SPANS..2 * SPANS {
        processor.on_end(span(i));
    }
    processor
        .shutdown_with_timeout(Duration::from_secs(30))
        .expect("shutdown");
    let counts = health.counts();
    assert_eq!(counts.produced, 2 * SPANS);
    assert_eq!(counts.delivered, 2 * SPANS);
    assert_eq!(counts.lost, 0);
    assert_eq!(got.load(Ordering::Relaxed), 2 * SPANS);
    assert_eq!(before.load(Ordering::Relaxed), 2 * SPANS);
    assert_eq!(after.load(Ordering::Relaxed), 2 * SPANS);
}

//! A collector that refuses every request (gRPC `UNAVAILABLE`, HTTP 503) sees exactly the
//! attempts of gpuspan's own retry, over gRPC and HTTP, for spans and for metrics: one
//! attempt, then one after each backoff (100 ms doubling up to 5 s), and no request more
//! from a transport retrying underneath. At shutdown a metric export is tried once.

use gpuspan_test_support as support;

use std::time::{Duration, Instant};

use gpuspan::settings::Exporter;
use support::receiver::{Protocol, Receiver, Signal};

/// gpuspan's retry settings, for spans (the export queue) and metrics alike: the first
/// backoff, doubled after every failure up to the longest.
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
const LONGEST_BACKOFF: Duration = Duration::from_secs(5);

/// How long the attempts are counted, from the first one. The retry schedule is at 0,
/// 0.1, 0.3, 0.7, 1.5 and 3.1 s: 2.3 s lies 0.8 s from the attempts on either side, so a
/// slow machine does not move the count.
const WINDOW: Duration = Duration::from_millis(2300);

/// The export timeout: each request's bound, and how long shutdown waits. The spans'
/// shutdown retries at 0, 0.1, 0.3 and 0.7 s, then would at 1.5 s, past 1.1 s.
const TIMEOUT: Duration = Duration::from_millis(1100);

/// The attempts gpuspan's retry makes at one refused batch within `window` of its first.
fn attempts_within(window: Duration) -> u64 {
    let (mut at, mut backoff, mut attempts) = (Duration::ZERO, FIRST_BACKOFF, 1);
    loop {
        at += backoff;
        if at > window {
            return attempts;
        }
        attempts += 1;
        backoff = (backoff * 2).min(LONGEST_BACKOFF);
    }
}

/// Waits for the first request of `signal`, then counts its requests over `WINDOW`.
fn attempts_over_window(receiver: &Receiver, signal: Signal) -> u64 {
    let give_up = Instant::now() + Duration::from_secs(10);
    while receiver.attempts_of(signal) == 0 {
        assert!(Instant::now() < give_up, "no {signal:?} request arrived");
        std::thread::sleep(Duration::from_millis(2));
    }
    std::thread::sleep(WINDOW);
    receiver.attempts_of(signal)
}

fn refusing(protocol: Protocol) -> Receiver {
    let receiver = Receiver::start(protocol);
    receiver.set_failing(true);
    receiver
}

#[test]
fn a_refused_span_batch_is_tried_on_the_queues_schedule_only() {
    assert_eq!(attempts_within(WINDOW), 5);
    let mut wrong = Vec::new();
    for protocol in [Protocol::Grpc, Protocol::Http] {
        let receiver = refusing(protocol);
        let builder = support::setup::to_receiver(&receiver)
            .metrics_exporter(Exporter::None)
            .timeout(TIMEOUT);
        let (telemetry, ()) = support::setup::run(builder, |_| {
            let _s = gpuspan::step_span!(0);
        });
        let attempts = attempts_over_window(&receiver, Signal::Traces);
        let _ = telemetry.shutdown();
        if attempts != attempts_within(WINDOW) {
            wrong.push(format!("{protocol:?}: {attempts} requests"));
        }
    }
    assert!(
        wrong.is_empty(),
        "one batch of spans in {WINDOW:?}: expected {} requests, got {wrong:?}",
        attempts_within(WINDOW)
    );
}

#[test]
fn a_refused_metric_export_is_tried_on_the_exporters_schedule_only() {
    let mut wrong = Vec::new();
    for protocol in [Protocol::Grpc, Protocol::Http] {
        let receiver = refusing(protocol);
        // No collection falls due by itself: the one the flush makes is retried until
        // the interval ends, far past the window.
        let builder = support::setup::to_receiver(&receiver)
            .traces_exporter(Exporter::None)
            .metric_export_interval(Duration::from_secs(60))
            .timeout(TIMEOUT);
        let telemetry = builder.build().expect("gpuspan builds");
        let attempts = std::thread::scope(|scope| {
            let counting = scope.spawn(|| attempts_over_window(&receiver, Signal::Metrics));
            // Refused: it returns after the timeout, and the export goes on retrying.
            let _ = telemetry.flush();
            counting.join().expect("the count ends")
        });
        let _ = telemetry.shutdown();
        if attempts != attempts_within(WINDOW) {
            wrong.push(format!("{protocol:?}: {attempts} requests"));
        }
    }
    assert!(
        wrong.is_empty(),
        "one collection of metrics in {WINDOW:?}: expected {} requests, got {wrong:?}",
        attempts_within(WINDOW)
    );
}

#[test]
fn shutdown_tries_the_last_metrics_once_and_the_spans_until_its_timeout() {
    assert_eq!(attempts_within(TIMEOUT), 4);
    let mut wrong = Vec::new();
    for protocol in [Protocol::Grpc, Protocol::Http] {
        let receiver = refusing(protocol);
        let builder = support::setup::to_receiver(&receiver)
            .metric_export_interval(Duration::from_secs(60))
            .timeout(TIMEOUT);
        let (telemetry, ()) = support::setup::run(builder, |_| {
            let _s = gpuspan::step_span!(0);
        });
        let result = telemetry.shutdown();
        assert!(
            matches!(
                result,
                Err(gpuspan::ShutdownError::Dropped { spans: 1, .. })
            ),
            "{protocol:?}: the refused span is not reported lost: {result:?}"
        );
        let metrics = receiver.attempts_of(Signal::Metrics);
        let spans = receiver.attempts_of(Signal::Traces);
        if (metrics, spans) != (1, attempts_within(TIMEOUT)) {
            wrong.push(format!(
                "{protocol:?}: {metrics} metric and {spans} span requests"
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "shutdown waiting {TIMEOUT:?}: expected 1 metric and {} span requests, got {wrong:?}",
        attempts_within(TIMEOUT)
    );
}

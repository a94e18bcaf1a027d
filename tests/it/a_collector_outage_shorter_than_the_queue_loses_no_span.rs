//! Completed spans wait and are retried while the collector is down: an outage shorter
//! than the export queue loses nothing, a longer one loses the oldest spans first, and in
//! every case the spans delivered plus the spans reported lost are the spans produced.

use gpuspan_test_support as support;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use gpuspan::ShutdownError;
use support::receiver::{Protocol, Receiver, Signal};

/// Runs `steps` steps of `step_time` in one epoch; the receiver is down for the steps in
/// `outage`.
fn run(
    receiver: &Receiver,
    queue: usize,
    steps: u64,
    step_time: Duration,
    outage: std::ops::Range<u64>,
) -> (Result<(), ShutdownError>, Duration) {
    let builder = support::setup::to_receiver(receiver)
        .timeout(Duration::from_secs(2))
        .export_queue(queue);
    let (telemetry, slowest) = support::setup::run(builder, |_| {
        let mut slowest = Duration::ZERO;
        let _e = gpuspan::epoch_span!(0);
        for step in 0..steps {
            receiver.set_failing(outage.contains(&step));
            let started = Instant::now();
            {
                let _s = gpuspan::step_span!(step);
                std::thread::sleep(step_time);
            }
            slowest = slowest.max(started.elapsed());
        }
        receiver.set_failing(false);
        slowest
    });
    (telemetry.shutdown(), slowest)
}

fn received_steps(receiver: &Receiver) -> Vec<i64> {
    receiver
        .spans_named("step")
        .iter()
        .map(|s| s.int_attr("ml.step").expect("ml.step"))
        .collect()
}

#[test]
fn a_short_outage_loses_nothing_and_training_keeps_its_pace() {
    for protocol in [Protocol::Grpc, Protocol::Http] {
        let receiver = Receiver::start(protocol);
        // 400 steps of 4 ms; down for 1.2 s in the middle.
        let (result, slowest) = run(
            &receiver,
            4096,
            400,
            Duration::from_millis(4),
            100..400 - 100,
        );
        result.unwrap_or_else(|e| panic!("{protocol:?}: {e}"));
        let steps = received_steps(&receiver);
        let unique: BTreeSet<i64> = steps.iter().copied().collect();
        assert_eq!(unique.len(), 400, "{protocol:?}: steps missing");
        assert_eq!(steps.len(), 400, "{protocol:?}: steps delivered twice");
        assert_eq!(receiver.spans_named("epoch").len(), 1);
        assert!(
            // Trace requests only: the shutdown's metric export alone would pass this.
            receiver.attempts_of(Signal::Traces) > receiver.trace_requests() as u64,
            "{protocol:?}: the outage refused no trace request, so it tested nothing"
        );
        assert!(
            slowest < Duration::from_millis(250),
            "{protocol:?}: a step took {slowest:?} during the outage"
        );
    }
}

#[test]
fn a_longer_outage_loses_the_oldest_spans_and_counts_them_exactly() {
    for protocol in [Protocol::Grpc, Protocol::Http] {
        let receiver = Receiver::start(protocol);
        // A queue of 50 spans; down for the first 200 steps, then up for 40 (which, with
        // the epoch, fit in the queue while the exporter waits out its backoff).
        let (result, _) = run(&receiver, 50, 240, Duration::from_millis(2), 0..200);
        let lost = match result {
            Err(ShutdownError::Dropped { spans, .. }) => spans,
            other => panic!("{protocol:?}: expected lost spans, got {other:?}"),
        };
        let steps = received_steps(&receiver);
        let delivered = steps.len() as u64 + receiver.spans_named("epoch").len() as u64;
        assert_eq!(
            delivered + lost,
            241,
            "{protocol:?}: delivered {delivered}, lost {lost}"
        );
        assert!(
            lost > 0,
            "{protocol:?}: an outage longer than the queue lost nothing"
        );
        let unique: BTreeSet<i64> = steps.iter().copied().collect();
        assert_eq!(unique.len(), steps.len(), "{protocol:?}: duplicates");
        for step in 200..240 {
            assert!(
                unique.contains(&step),
                "{protocol:?}: step {step} after the outage lost"
            );
        }
        // What was given up is the oldest: nothing from the first half of the outage.
        assert!(
            unique.iter().all(|&s| s >= 100),
            "{protocol:?}: old steps kept while newer ones were lost: {unique:?}"
        );
    }
}

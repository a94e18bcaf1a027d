//! `MemorySpan::abandon` is for a step opened ahead of work that never came (the step a
//! loop opens after its last optimizer step). The abandoned step is not exported, and the
//! epoch it was opened in still is, with every step that did end: an abandoned span must
//! not keep its parent open.

use gpuspan_test_support as support;

use std::time::Duration;

use support::receiver::{ReceivedSpan, Receiver};
use support::setup;

const STEPS: i64 = 4;

fn steps_of(steps: &[ReceivedSpan], epoch: &ReceivedSpan) -> Vec<i64> {
    let mut indexes: Vec<i64> = steps
        .iter()
        .filter(|s| s.is_child_of(epoch))
        .map(|s| s.int_attr("ml.step").expect("ml.step"))
        .collect();
    indexes.sort_unstable();
    indexes
}

#[test]
fn each_epoch_holding_an_abandoned_step_is_exported_with_its_other_steps() {
    let receiver = Receiver::start_grpc();
    let (telemetry, ()) = setup::run(setup::to_receiver(&receiver), |_| {
        let mut index = 0;
        for epoch in 0..3 {
            let _epoch = gpuspan::epoch_span!(epoch);
            for _ in 0..STEPS {
                let _step = gpuspan::step_span!(index);
                index += 1;
            }
            // Opened for the next optimizer step, which comes in no epoch of this loop.
            gpuspan::step_span!(index).abandon();
        }
    });
    telemetry.shutdown().expect("clean shutdown");

    let epochs = receiver.spans_named("epoch");
    let steps = receiver.spans_named("step");
    let mut epoch_indexes: Vec<i64> = epochs
        .iter()
        .map(|e| e.int_attr("ml.epoch").unwrap())
        .collect();
    epoch_indexes.sort_unstable();
    assert_eq!(epoch_indexes, [0, 1, 2], "every epoch is exported");
    assert_eq!(
        steps.len(),
        12,
        "the 12 steps that ended, and no abandoned one"
    );
    for epoch in &epochs {
        let e = epoch.int_attr("ml.epoch").unwrap();
        assert_eq!(
            steps_of(&steps, epoch),
            (e * STEPS..(e + 1) * STEPS).collect::<Vec<_>>(),
            "epoch {e}'s own steps, under it"
        );
    }
}

#[test]
fn an_abandoned_span_inside_an_abandoned_one_leaves_neither_and_the_next_epoch_whole() {
    let receiver = Receiver::start_grpc();
    let (telemetry, ()) = setup::run(setup::to_receiver(&receiver), |_| {
        // Inner first, then outer.
        let outer = gpuspan::epoch_span!(0);
        gpuspan::step_span!(0).abandon();
        outer.abandon();
        // Outer first, while the inner one is still open: the inner one, abandoned or
        // ended, belongs to work that is not exported either.
        let outer = gpuspan::epoch_span!(1);
        let inner = gpuspan::step_span!(1);
        let ended = gpuspan::step_span!(2);
        outer.abandon();
        inner.abandon();
        drop(ended);
        {
            let _epoch = gpuspan::epoch_span!(2);
            let _step = gpuspan::step_span!(3);
        }
    });
    telemetry.shutdown().expect("clean shutdown");

    let epochs = receiver.spans_named("epoch");
    let steps = receiver.spans_named("step");
    assert_eq!(epochs.len(), 1, "{epochs:?}");
    assert_eq!(epochs[0].int_attr("ml.epoch"), Some(2));
    assert_eq!(steps.len(), 1, "{steps:?}");
    assert!(steps[0].is_child_of(&epochs[0]));
    assert_eq!(steps[0].int_attr("ml.step"), Some(3));
}

#[test]
fn an_abandoned_step_whose_clone_closes_on_another_thread_is_not_exported_either() {
    let receiver = Receiver::start_grpc();
    let (telemetry, clone) = setup::run(setup::to_receiver(&receiver), |_| {
        let epoch = gpuspan::epoch_span!(0);
        let step = gpuspan::step_span!(0);
        let clone = step.span().clone();
        step.abandon();
        drop(epoch);
        clone
    });
    std::thread::spawn(move || drop(clone))
        .join()
        .expect("the clone is dropped on its thread");
    telemetry.shutdown().expect("clean shutdown");

    let epochs = receiver.wait_for_spans(
        |spans| spans.iter().any(|s| s.name == "epoch"),
        Duration::from_secs(5),
    );
    assert_eq!(
        epochs.iter().filter(|s| s.name == "epoch").count(),
        1,
        "{epochs:?}"
    );
    assert!(receiver.spans_named("step").is_empty());
}

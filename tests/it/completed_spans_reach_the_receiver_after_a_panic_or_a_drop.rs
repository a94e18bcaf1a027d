//! Completed spans are exported when the telemetry is shut down, dropped without shutdown,
//! or dropped while a panic unwinds out of an epoch.

use gpuspan_test_support as support;

use std::time::Duration;

use support::receiver::{Receiver, StatusCode};
use support::setup;

fn step_names(receiver: &Receiver) -> Vec<i64> {
    let mut steps: Vec<i64> = receiver
        .spans_named("step")
        .iter()
        .filter_map(|s| s.int_attr("ml.step"))
        .collect();
    steps.sort_unstable();
    steps
}

#[test]
fn drop_without_shutdown_flushes() {
    let receiver = Receiver::start_grpc();
    let (telemetry, ()) = setup::run(setup::to_receiver(&receiver), |_| {
        let _e = gpuspan::epoch_span!(0);
        for step in 0..5 {
            let _s = gpuspan::step_span!(step);
        }
    });
    drop(telemetry);
    assert_eq!(step_names(&receiver), vec![0, 1, 2, 3, 4]);
    assert_eq!(receiver.spans_named("epoch").len(), 1);
}

#[test]
fn a_panic_inside_an_epoch_keeps_the_completed_spans_and_marks_the_open_ones() {
    let receiver = Receiver::start_http();
    let telemetry = setup::to_receiver(&receiver).build().unwrap();
    let layer = telemetry.layer();
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
        use tracing_subscriber::layer::SubscriberExt;
        let subscriber = tracing_subscriber::registry().with(layer);
        tracing::subscriber::with_default(subscriber, || {
            let _e = gpuspan::epoch_span!(3);
            for step in 0..4 {
                let _s = gpuspan::step_span!(step);
                if step == 2 {
                    panic!("out of memory in step 2");
                }
            }
        })
    }));
    assert!(outcome.is_err(), "the training loop panicked");
    drop(telemetry);

    assert_eq!(step_names(&receiver), vec![0, 1, 2]);
    let failed = receiver
        .spans_named("step")
        .into_iter()
        .find(|s| s.int_attr("ml.step") == Some(2))
        .unwrap();
    assert_eq!(failed.status_code, StatusCode::Error);
    assert!(failed.status_message.contains("panicked"));
    assert!(
        failed.int_attr("process.memory.peak").is_some(),
        "memory is still recorded"
    );
    let epoch = &receiver.spans_named("epoch")[0];
    assert_eq!(epoch.int_attr("ml.epoch"), Some(3));
    assert_eq!(epoch.status_code, StatusCode::Error);
}

#[test]
fn shutdown_exports_everything_and_reports_success() {
    let receiver = Receiver::start_grpc();
    let (telemetry, ()) = setup::run(
        setup::to_receiver(&receiver).sample_interval(Duration::from_millis(1)),
        |_| {
            for epoch in 0..3 {
                let _e = gpuspan::epoch_span!(epoch);
                for step in 0..100 {
                    let _s = gpuspan::step_span!(step);
                }
            }
        },
    );
    telemetry.shutdown().expect("nothing lost");
    assert_eq!(receiver.spans_named("step").len(), 300);
    assert_eq!(receiver.spans_named("epoch").len(), 3);
}

//! A memory budget: the spans whose peak exceeds it get a `gpu.memory.budget_exceeded`
//! event with the budget, the peak and the device, count in the metric and, when asked,
//! an error status; the spans under it get nothing.

use gpuspan_test_support as support;

use std::time::Duration;

use gpuspan::MemoryBudget;
use support::receiver::{ReceivedSpan, Receiver, StatusCode};
use support::scripted::scripted;
use support::setup;

const GIB: u64 = 1 << 30;

fn run(builder: gpuspan::Builder) {
    let (source, script) = scripted(1, 30 * GIB);
    let builder = builder
        .memory_source(source)
        .sample_interval(Duration::from_millis(2))
        .metric_export_interval(Duration::from_secs(3600));
    let (telemetry, ()) = setup::run(builder, |_| {
        script.wait_reads(2);
        let _e = gpuspan::epoch_span!(0);
        {
            let _s = gpuspan::step_span!(0);
            script.wait_reads(2);
        }
        {
            // A spike to 45 GiB between two readings of 30 GiB.
            let _s = gpuspan::step_span!(1);
            script.set(0, 45 * GIB);
            script.wait_reads(2);
            script.set(0, 30 * GIB);
            script.wait_reads(2);
        }
    });
    telemetry.shutdown().unwrap();
}

fn step(receiver: &Receiver, index: i64) -> ReceivedSpan {
    receiver
        .spans_named("step")
        .into_iter()
        .find(|s| s.int_attr("ml.step") == Some(index))
        .unwrap()
}

#[test]
fn the_spans_over_a_byte_budget_get_the_event_and_the_error_status() {
    let receiver = Receiver::start_grpc();
    let builder = setup::to_receiver(&receiver)
        .memory_budget(MemoryBudget::Bytes(40 * GIB))
        .memory_budget_error(true);
    run(builder);

    let under = step(&receiver, 0);
    assert_eq!(under.events, vec![]);
    assert_eq!(under.status_code, StatusCode::Unset);

    let over = step(&receiver, 1);
    let events = over.events_named("gpu.memory.budget_exceeded");
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].int_attr("gpu.index"), Some(0));
    assert_eq!(
        events[0].int_attr("gpu.memory.peak"),
        Some((45 * GIB) as i64)
    );
    assert_eq!(
        events[0].int_attr("gpu.memory.budget"),
        Some((40 * GIB) as i64)
    );
    assert_eq!(over.status_code, StatusCode::Error);
    assert_eq!(
        over.status_message,
        "memory budget exceeded: peak 45.0 GiB over the budget of 40.0 GiB on gpu 0"
    );
    // The epoch's peak is the step's: it is over too.
    let epoch = &receiver.spans_named("epoch")[0];
    assert_eq!(epoch.events_named("gpu.memory.budget_exceeded").len(), 1);

    let points = receiver.points_named("gpu.memory.budget_exceeded");
    assert_eq!(points.last().and_then(|p| p.as_int()), Some(2));
}

#[test]
fn a_fraction_of_the_device_is_the_budget_and_no_error_status_by_default() {
    let receiver = Receiver::start_http();
    // 50 % of the scripted device's 80 GiB.
    let builder = setup::to_receiver(&receiver).memory_budget(MemoryBudget::Fraction(0.5));
    run(builder);

    let over = step(&receiver, 1);
    let events = over.events_named("gpu.memory.budget_exceeded");
    assert_eq!(events.len(), 1);
    assert_eq!(
        events[0].int_attr("gpu.memory.budget"),
        Some((40 * GIB) as i64)
    );
    assert_eq!(over.status_code, StatusCode::Unset);
    assert_eq!(step(&receiver, 0).events, vec![]);
}

#[test]
fn with_the_stop_action_a_loop_that_checks_stops_at_the_end_of_the_step_that_went_over() {
    let receiver = Receiver::start_grpc();
    let (source, script) = scripted(1, 30 * GIB);
    let builder = setup::to_receiver(&receiver)
        .memory_budget(MemoryBudget::Bytes(40 * GIB))
        .memory_budget_stop(true)
        .memory_source(source)
        .sample_interval(Duration::from_millis(2))
        .metric_export_interval(Duration::from_secs(3600));
    let (telemetry, (steps, reason)) = setup::run(builder, |telemetry| {
        script.wait_reads(2);
        let mut reason = None;
        let mut steps = 0;
        for step in 0..10u64 {
            let _s = gpuspan::step_span!(step);
            steps += 1;
            if step == 3 {
                // Step 3 goes over the budget and frees it before it ends.
                script.set(0, 45 * GIB);
                script.wait_reads(2);
                script.set(0, 30 * GIB);
            }
            script.wait_reads(2);
            reason = telemetry.stop_requested();
            if reason.is_some() {
                break;
            }
        }
        (steps, reason)
    });
    telemetry.shutdown().unwrap();

    assert_eq!(
        steps, 4,
        "the loop ends with step 3, the step that went over"
    );
    assert_eq!(
        reason.as_deref(),
        Some(
            "gpuspan: gpu 0 reached 45.0 GiB, over the memory budget of 40.0 GiB \
             (GPUSPAN_MEMORY_BUDGET_STOP)"
        )
    );
    assert_eq!(receiver.spans_named("step").len(), 4);
    let over = step(&receiver, 3);
    assert_eq!(over.events_named("gpu.memory.budget_exceeded").len(), 1);
    assert_eq!(step(&receiver, 2).events, vec![]);
}

#[test]
fn the_stop_action_without_a_budget_is_refused_with_the_fix() {
    let error = gpuspan::Telemetry::builder()
        .memory_budget_stop(true)
        .build()
        .expect_err("nothing to stop on");
    let text = error.to_string();
    assert!(text.contains("memory_budget_stop"), "{text}");
    assert!(text.contains("set GPUSPAN_MEMORY_BUDGET"), "{text}");
}

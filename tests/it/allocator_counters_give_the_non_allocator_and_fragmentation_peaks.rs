//! Driver versus framework: with allocator counters fed, a span carries
//! `gpu.memory.non_allocator.peak` (this process's GPU memory minus the allocator's
//! reserved pool) and `gpu.allocator.fragmentation.peak` (reserved minus allocated).

use gpuspan_test_support as support;

use std::time::Duration;

use support::receiver::{ReceivedSpan, Receiver};
use support::scripted::scripted;
use support::setup;

const MIB: u64 = 1 << 20;

/// A step under a driver that says this process holds 7000 MiB on the device, with
/// `allocator` (allocated, reserved) fed while it runs, if given; its span.
fn step_holding_7000_mib(receiver: Receiver, allocator: Option<(u64, u64)>) -> ReceivedSpan {
    let (source, script) = scripted(1, 9000 * MIB);
    script.set_process(Some(7000 * MIB));
    let builder = setup::to_receiver(&receiver)
        .memory_source(source)
        .sample_interval(Duration::from_millis(2));
    let (telemetry, ()) = setup::run(builder, |_| {
        script.wait_reads(2);
        let _s = gpuspan::step_span!(0);
        if let Some((allocated, reserved)) = allocator {
            gpuspan::record_allocator(allocated, reserved);
            script.wait_reads(2);
        }
    });
    telemetry.shutdown().unwrap();
    let step = receiver.spans_named("step").remove(0);
    assert_eq!(
        step.int_attr("gpu.process.memory.peak"),
        Some((7000 * MIB) as i64)
    );
    step
}

#[test]
fn the_three_numbers_are_split_on_the_span() {
    // The framework: 5000 MiB allocated out of a 6200 MiB pool.
    let step = step_holding_7000_mib(Receiver::start_grpc(), Some((5000 * MIB, 6200 * MIB)));
    assert_eq!(
        step.int_attr("gpu.memory.non_allocator.peak"),
        Some((800 * MIB) as i64)
    );
    assert_eq!(
        step.int_attr("gpu.allocator.fragmentation.peak"),
        Some((1200 * MIB) as i64)
    );
}

#[test]
fn without_allocator_counters_neither_is_there() {
    let step = step_holding_7000_mib(Receiver::start_http(), None);
    assert_eq!(step.int_attr("gpu.memory.non_allocator.peak"), None);
    assert_eq!(step.int_attr("gpu.allocator.fragmentation.peak"), None);
}

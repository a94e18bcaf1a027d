//! Driver versus framework: with allocator counters fed, a span carries
//! `gpu.memory.non_allocator.peak` (this process's GPU memory minus the allocator's
//! reserved pool) and `gpu.allocator.fragmentation.peak` (reserved minus allocated).

use gpuspan_test_support as support;

use std::time::Duration;

use support::receiver::Receiver;
use support::scripted::scripted;
use support::setup;

const MIB: u64 = 1 << 20;

#[test]
fn the_three_numbers_are_split_on_the_span() {
    let receiver = Receiver::start_grpc();
    let (source, script) = scripted(1, 9000 * MIB);
    // The driver says this process holds 7000 MiB on the device.
    script.set_process(Some(7000 * MIB));
    let builder = setup::to_receiver(&receiver)
        .memory_source(source)
        .sample_interval(Duration::from_millis(2));
    let (telemetry, ()) = setup::run(builder, |_| {
        script.wait_reads(2);
        let _s = gpuspan::step_span!(0);
        // The framework: 5000 MiB allocated out of a 6200 MiB pool.
        gpuspan::record_allocator(5000 * MIB, 6200 * MIB);
        script.wait_reads(2);
    });
    telemetry.shutdown().unwrap();

    let step = &receiver.spans_named("step")[0];
    assert_eq!(
        step.int_attr("gpu.process.memory.peak"),
        Some((7000 * MIB) as i64)
    );
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
    let receiver = Receiver::start_http();
    let (source, script) = scripted(1, 9000 * MIB);
    script.set_process(Some(7000 * MIB));
    let builder = setup::to_receiver(&receiver)
        .memory_source(source)
        .sample_interval(Duration::from_millis(2));
    let (telemetry, ()) = setup::run(builder, |_| {
        script.wait_reads(2);
        let _s = gpuspan::step_span!(0);
    });
    telemetry.shutdown().unwrap();
    let step = &receiver.spans_named("step")[0];
    assert_eq!(
        step.int_attr("gpu.process.memory.peak"),
        Some((7000 * MIB) as i64)
    );
    assert_eq!(step.int_attr("gpu.memory.non_allocator.peak"), None);
    assert_eq!(step.int_attr("gpu.allocator.fragmentation.peak"), None);
}

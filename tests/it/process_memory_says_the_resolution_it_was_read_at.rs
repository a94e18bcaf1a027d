//! `gpu.process.memory.*` says in `gpu.process.memory.resolution` how often the process
//! lists behind it were read: at every tick while lists are cheap, and on a slower cadence
//! planned from their cost when they cost what a real driver's do (4.5 ms each, so that
//! one device's list takes at most 2 % of the time).

use gpuspan_test_support as support;

use std::time::Duration;

use support::fake_nvml::{FakeNvml, MIB, PROCESS_LIST};
use support::receiver::{ReceivedSpan, Receiver};
use support::sampling::{self, triple, wait_for_ticks};
use support::setup;

const INTERVAL: Duration = Duration::from_millis(4);
const MINE: u64 = 700 * MIB + 3;

fn one_step(fake: &FakeNvml, ticks: u64) -> ReceivedSpan {
    fake.set_processes(0, &[(std::process::id(), MINE), (1, 9 * MIB)]);
    let receiver = Receiver::start_grpc();
    let builder = setup::to_receiver(&receiver)
        .nvml_lib(fake.path())
        .devices("0")
        .sample_interval(INTERVAL);
    let (telemetry, ()) = sampling::run(builder, |_| {
        let _step = gpuspan::step_span!(0);
        wait_for_ticks(fake, 1, ticks);
    });
    telemetry.shutdown().expect("clean shutdown");
    let mut steps = receiver.spans_named("step");
    assert_eq!(steps.len(), 1);
    steps.remove(0)
}

#[test]
fn cheap_lists_are_read_at_every_tick() {
    let fake = FakeNvml::build();
    // Cheap even when the suite runs with a real driver's latencies.
    fake.set_latency(PROCESS_LIST, Duration::ZERO);
    let step = one_step(&fake, 3);
    assert_eq!(
        triple(&step, "gpu.process.memory"),
        Some((MINE, MINE, MINE))
    );
    assert_eq!(
        step.int_attr("gpu.process.memory.resolution"),
        Some(INTERVAL.as_nanos() as i64)
    );
}

#[test]
fn a_real_drivers_lists_are_read_a_few_times_a_second_and_say_so() {
    let fake = FakeNvml::build();
    fake.set_latency(PROCESS_LIST, Duration::from_micros(4500));
    // 100 ticks: 400 ms at least, room for the first list and one or two more.
    let step = one_step(&fake, 100);
    assert_eq!(
        triple(&step, "gpu.process.memory"),
        Some((MINE, MINE, MINE))
    );
    let resolution = step
        .int_attr("gpu.process.memory.resolution")
        .expect("the resolution is there");
    // 4.5 ms at most 2 % of the time: every 225 ms at least; a slower list (a busy
    // machine) only widens it.
    assert!(resolution >= 225_000_000, "{resolution} ns");
    let lists = fake.call_count(PROCESS_LIST);
    assert!((1..=8).contains(&lists), "{lists} lists over about 400 ms");
}

//! `gpu.process.memory.*` is this process's own GPU memory from NVML's per-process lists,
//! summed over its entries on the devices in scope: other processes' entries are left out,
//! and where the driver cannot tell (query not supported, symbols missing, figure not
//! available) the attributes are absent, not zero, while device memory is still recorded.

use gpuspan_test_support as support;

use support::fake_nvml::{code, FakeNvml, MIB, NO_PROCESS_QUERIES};
use support::receiver::{ReceivedSpan, Receiver};
use support::sampling::{self, triple, wait_for_lists};
use support::setup;

const GIB: u64 = 1024 * MIB;
const PROCESS_QUERY: &str = "nvmlDeviceGetComputeRunningProcesses_v3";

/// Another process on the machine (pid 1 is never a test).
const OTHER: u32 = 1;

/// Runs one step on `fake` with both devices in scope, doing `during` while it is open,
/// and returns the span.
fn one_step(fake: &FakeNvml, during: impl FnOnce(&dyn Fn())) -> ReceivedSpan {
    step_on(fake, "0,1", 2, during)
}

/// Runs one step on `fake` with `devices` (`in_scope` of them) in scope. `during` gets a
/// function that waits until every device has been read and listed afresh: the process
/// lists run on a cadence of their own, slower than the ticks on a real driver.
fn step_on(
    fake: &FakeNvml,
    devices: &str,
    in_scope: u64,
    during: impl FnOnce(&dyn Fn()),
) -> ReceivedSpan {
    let receiver = Receiver::start_grpc();
    let builder = setup::on_fake_nvml(&receiver, fake.path()).devices(devices);
    let (telemetry, ()) = sampling::run(builder, |telemetry| {
        let fresh = || wait_for_lists(telemetry, fake, in_scope, 1);
        // The step starts from figures of lists of every device.
        fresh();
        let _step = gpuspan::step_span!(0);
        fresh();
        during(&fresh);
        fresh();
    });
    telemetry.shutdown().expect("clean shutdown");
    let mut steps = receiver.spans_named("step");
    assert_eq!(steps.len(), 1);
    steps.remove(0)
}

fn two_devices(fake: &FakeNvml) {
    fake.set_device_count(2);
    fake.set_memory(0, 6 * GIB, 80 * GIB);
    fake.set_memory(1, 3 * GIB, 80 * GIB);
}

fn assert_no_process_memory(step: &ReceivedSpan, device_memory: u64) {
    for key in ["start", "end", "peak"] {
        let key = format!("gpu.process.memory.{key}");
        assert!(
            !step.attributes.contains_key(&key),
            "{key} is absent, not zero: {:?}",
            step.attributes
        );
    }
    // Device memory is still there.
    let m = device_memory;
    assert_eq!(triple(step, "gpu.memory"), Some((m, m, m)));
}

#[test]
fn this_process_entries_are_summed_and_others_ignored() {
    let me = std::process::id();
    let fake = FakeNvml::build();
    two_devices(&fake);
    // Two entries of this process on device 0 (as with several GPU instances), one on
    // device 1, and other processes holding far more.
    let mine_0 = [300 * MIB + 11, 50 * MIB];
    fake.set_processes(0, &[(me, mine_0[0]), (OTHER, 4 * GIB), (me, mine_0[1])]);
    fake.set_processes(1, &[(OTHER + 1, 2 * GIB), (me, 200 * MIB + 7)]);
    let at_rest = mine_0[0] + mine_0[1] + 200 * MIB + 7;
    let grown = 900 * MIB + 5;

    let step = one_step(&fake, |fresh| {
        // This process grows on device 0, then shrinks back, while the step is open.
        fake.set_processes(0, &[(me, grown), (OTHER, 4 * GIB), (me, mine_0[1])]);
        fresh();
        fake.set_processes(0, &[(me, mine_0[0]), (OTHER, 4 * GIB), (me, mine_0[1])]);
    });

    let peak = grown + mine_0[1] + 200 * MIB + 7;
    assert_eq!(
        triple(&step, "gpu.process.memory"),
        Some((at_rest, at_rest, peak)),
        "{:?}",
        step.attributes
    );
    assert_eq!(
        triple(&step, "gpu.memory"),
        Some((9 * GIB, 9 * GIB, 9 * GIB))
    );
}

#[test]
fn a_process_with_no_entries_holds_zero() {
    let fake = FakeNvml::build();
    two_devices(&fake);
    fake.set_processes(0, &[(OTHER, 4 * GIB)]);
    let step = one_step(&fake, |_| {});
    assert_eq!(triple(&step, "gpu.process.memory"), Some((0, 0, 0)));
}

#[test]
fn absent_when_the_driver_does_not_support_process_queries() {
    let fake = FakeNvml::build();
    two_devices(&fake);
    fake.set_processes(0, &[(std::process::id(), 300 * MIB)]);
    fake.set_error(PROCESS_QUERY, None, code::NOT_SUPPORTED);
    let step = one_step(&fake, |_| {});
    assert_no_process_memory(&step, 9 * GIB);
    // A driver that said "not supported" is not asked again at every tick.
    assert_eq!(fake.call_count(PROCESS_QUERY), 2, "one question per device");
}

#[test]
fn absent_when_the_driver_lacks_the_process_query_symbols() {
    let fake = FakeNvml::build_variant(&[NO_PROCESS_QUERIES]);
    two_devices(&fake);
    let step = one_step(&fake, |_| {});
    assert_no_process_memory(&step, 9 * GIB);
}

#[test]
fn absent_when_the_driver_cannot_say_how_much_this_process_holds() {
    let fake = FakeNvml::build();
    two_devices(&fake);
    // u64::MAX: NVML's "not available" (as under some virtualised or MIG setups).
    fake.set_processes(0, &[(std::process::id(), u64::MAX), (OTHER, GIB)]);
    let step = step_on(&fake, "0", 1, |_| {});
    assert_no_process_memory(&step, 6 * GIB);
}

#[test]
fn absent_when_one_of_several_devices_cannot_say_how_much_this_process_holds() {
    let fake = FakeNvml::build();
    two_devices(&fake);
    fake.set_processes(0, &[(std::process::id(), u64::MAX), (OTHER, GIB)]);
    fake.set_processes(1, &[(std::process::id(), 200 * MIB)]);
    let step = one_step(&fake, |_| {});
    assert_no_process_memory(&step, 9 * GIB);
}

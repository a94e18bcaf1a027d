//! With eight devices on a driver that costs what a real one does (a memory read 12 µs, a
//! process list 4.5 ms holding the driver's lock), device memory is still read at the
//! interval asked: the fake counts the reads, and a spike of two intervals on any device
//! is in the step's peak of that device to the byte. The process lists keep to their share
//! of the time instead of taking a device's 4.5 ms at every tick.
//!
//! Time is inherent here (a cadence is kept or not). A control thread in the test keeps
//! the same schedule doing nothing: where even it fell behind, the machine was too busy
//! to judge gpuspan's sampler, and that window is reported, not judged.

use gpuspan_test_support as support;

use std::time::{Duration, Instant};

use support::fake_nvml::{FakeNvml, MIB, PROCESS_LIST};
use support::idle_ticker::IdleTicker;
use support::receiver::Receiver;
use support::sampling::{self, triple, wait_for_ticks, MEMORY_INFO};
use support::setup;

const DEVICES: u32 = 8;
const INTERVAL: Duration = Duration::from_millis(5);
const STEPS: u64 = 10;
/// Each step lasts this long, with its spike this far in.
const STEP: Duration = Duration::from_millis(100);
const RISE: Duration = Duration::from_millis(40);
const BASE: u64 = 3000 * MIB + 5;
const GIB: u64 = 1024 * MIB;

#[test]
fn memory_keeps_its_ticks_and_spikes_while_process_lists_cost_a_real_drivers_time() {
    let fake = FakeNvml::build();
    fake.set_device_count(DEVICES);
    for dev in 0..DEVICES {
        fake.set_memory(dev, BASE, 80 * GIB);
        fake.set_processes(dev, &[(std::process::id(), GIB + u64::from(dev))]);
    }
    fake.set_realistic_latencies();
    let receiver = Receiver::start_grpc();
    let builder = setup::to_receiver(&receiver)
        .nvml_lib(fake.path())
        .devices("0,1,2,3,4,5,6,7")
        .sample_interval(INTERVAL);
    let fall = RISE + 2 * INTERVAL;
    let spike = |step: u64| BASE + (step + 1) * 7 * MIB + step;

    // What the machine alone costs a sampler: the slots a thread doing nothing misses.
    let control = IdleTicker::start("control", INTERVAL);
    let (telemetry, (reads, elapsed, held, judged)) = sampling::run(builder, |telemetry| {
        // The first list showed what lists cost and moved them off the sampler thread,
        // which lists every device once, back to back (nvml-wrapper calls twice per list).
        wait_for_ticks(&fake, u64::from(DEVICES), 2);
        let listed = || telemetry.sampler_stats().expect("enabled").process_lists;
        while listed() < u64::from(DEVICES) {
            std::thread::sleep(Duration::from_millis(5));
        }
        // A tick publishes the sum over every device's list.
        wait_for_ticks(&fake, u64::from(DEVICES), 1);
        let mut judged = Vec::new();
        let control_before = control.missed();
        let reads = fake.call_count(MEMORY_INFO);
        let held = fake.driver_lock_held();
        let started = Instant::now();
        for step in 0..STEPS {
            let missed = control.missed();
            let _step = gpuspan::step_span!(step);
            let dev = (step % u64::from(DEVICES)) as u32;
            fake.set_timeline(
                dev,
                &[(Duration::ZERO, BASE), (RISE, spike(step)), (fall, BASE)],
            );
            fake.start_timeline();
            let began = Instant::now();
            while began.elapsed() < STEP {
                std::thread::sleep(Duration::from_millis(2));
            }
            fake.set_timeline(dev, &[]);
            if control.missed() == missed {
                judged.push(step);
            }
        }
        let held = fake.driver_lock_held() - held;
        let window_missed = control.missed() - control_before;
        (
            fake.call_count(MEMORY_INFO) - reads,
            started.elapsed(),
            held,
            (judged, window_missed),
        )
    });
    drop(control);
    let (judged, control_missed) = judged;
    let stats = telemetry.sampler_stats().expect("enabled");
    telemetry.shutdown().expect("clean shutdown");

    // Memory: at least 95 % of the ticks the window had room for, every device each time.
    let rounds = reads / u64::from(DEVICES);
    let expected = elapsed.as_secs_f64() / INTERVAL.as_secs_f64();
    let lists = fake.call_count(PROCESS_LIST);
    eprintln!(
        "{rounds} memory rounds in {elapsed:?} ({expected:.0} scheduled), {lists} process \
         lists holding the driver lock {held:?}; {stats:?}"
    );
    // The control thread missed over 5 % of its slots: the machine, not gpuspan.
    if control_missed as f64 > 0.05 * expected {
        eprintln!("a thread doing nothing missed {control_missed} slots: ticks not judged");
    } else {
        assert!(
            rounds as f64 >= 0.95 * expected,
            "{rounds} memory rounds of {expected:.0}"
        );
    }
    // Process lists: far fewer than one per device per tick, within their 5 % share of the
    // window (with room for a list in flight at either end: nvml-wrapper makes two calls,
    // sizing then filling, so a list holds the lock 9 ms), and still taken.
    let share = elapsed.as_micros() as u64 / 20 + 2 * 9000;
    assert!(
        (held.as_micros() as u64) <= share,
        "process lists held the driver lock {held:?} over {elapsed:?}"
    );
    assert!(
        lists > u64::from(DEVICES),
        "process lists kept being taken: {lists}"
    );
    assert!(stats.process_interval.expect("lists apart") >= Duration::from_millis(720));

    let steps = receiver.spans_named("step");
    assert_eq!(steps.len(), STEPS as usize);
    assert!(
        judged.len() as u64 >= STEPS / 2,
        "only steps {judged:?} had a machine that kept a thread on schedule: too busy to judge"
    );
    for span in &steps {
        let step = span.int_attr("ml.step").expect("ml.step") as u64;
        let dev = step % u64::from(DEVICES);
        let (start, _, peak) = triple(span, &format!("gpu.{dev}.memory")).expect("per device");
        assert_eq!(start, BASE, "step {step}");
        if judged.contains(&step) {
            assert_eq!(
                peak,
                spike(step),
                "step {step}: the spike on gpu {dev} was missed"
            );
        }
        let resolution = span
            .int_attr("gpu.process.memory.resolution")
            .unwrap_or_else(|| panic!("process memory says its resolution: {:?}", span.attributes));
        assert!(resolution >= 720_000_000, "{resolution} ns");
        assert_eq!(span.int_attr("gpu.memory.resolution"), None, "not widened");
    }
}

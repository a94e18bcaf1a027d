//! The fake NVML's energy counter moves in 100 ms quanta along a scripted power: a span of a
//! quantum or more carries exactly the counter's increase, a shorter one an estimate from
//! the power readings that says so, a span across a driver reload no energy at all, and the
//! steps that ran throttled, and only they, their reasons.

use gpuspan_test_support as support;

use std::time::{Duration, Instant};

use support::fake_nvml::{reason, FakeNvml, ENERGY_QUANTUM};
use support::receiver::{ReceivedSpan, Receiver};
use support::sampling::{self, step_span};
use support::setup;
use support::throttle::Throttling;

const ENERGY: &str = "nvmlDeviceGetTotalEnergyConsumption";
const PATIENCE: Duration = Duration::from_secs(20);

/// Waits until the sampler has read every device's energy counter `reads` more times, all
/// begun after this call and the last one published.
fn wait_for_power_reads(fake: &FakeNvml, devices: u64, reads: u64) {
    let target = fake.call_count(ENERGY) + (reads + 1) * devices;
    let deadline = Instant::now() + PATIENCE;
    while fake.call_count(ENERGY) < target {
        assert!(
            Instant::now() < deadline,
            "the sampler stopped reading energy"
        );
        std::thread::sleep(Duration::from_micros(300));
    }
}

/// Waits until device 0's counter has just moved and the sampler has published a reading
/// of its new value; returns that value.
fn just_after_a_move(fake: &FakeNvml) -> u64 {
    let before = fake.current_energy(0);
    let deadline = Instant::now() + PATIENCE;
    while fake.current_energy(0) == before {
        assert!(Instant::now() < deadline, "the fake's counter stopped");
        std::thread::sleep(Duration::from_micros(300));
    }
    wait_for_power_reads(fake, 1, 1);
    fake.current_energy(0)
}

fn builder(receiver: &Receiver, fake: &FakeNvml) -> gpuspan::Builder {
    setup::to_receiver(receiver)
        .nvml_lib(fake.path())
        .devices("0")
        .sample_interval(Duration::from_millis(2))
}

fn duration(span: &ReceivedSpan) -> Duration {
    Duration::from_nanos(span.end_time_unix_nano - span.start_time_unix_nano)
}

#[test]
fn a_span_of_a_quantum_or_more_carries_the_counter_s_increase_exactly() {
    let fake = FakeNvml::build();
    fake.set_power(0, 280_000);
    let receiver = Receiver::start_grpc();
    const RUNS: i64 = 4;
    let (telemetry, counted) = sampling::run(builder(&receiver, &fake), |_| {
        let mut counted = Vec::new();
        for step in 0..RUNS {
            let start = just_after_a_move(&fake);
            let span = gpuspan::step_span!(step, batch_size = 7);
            let still = fake.current_energy(0) == start;
            std::thread::sleep(2 * ENERGY_QUANTUM + ENERGY_QUANTUM / 2);
            let end = just_after_a_move(&fake);
            drop(span);
            // A machine too busy to read within one quantum is not judged.
            if still && fake.current_energy(0) == end {
                counted.push((step, end - start));
            }
        }
        counted
    });
    telemetry.shutdown().expect("clean shutdown");

    assert!(
        counted.len() >= 2,
        "only {} of {RUNS} runs were read within one quantum: too busy a machine to judge",
        counted.len()
    );
    let steps = receiver.spans_named("step");
    for (step, millijoules) in counted {
        let span = steps
            .iter()
            .find(|s| s.int_attr("ml.step") == Some(step))
            .expect("every step is exported");
        let joules = millijoules as f64 / 1000.0;
        assert_eq!(span.double_attr("gpu.energy"), Some(joules), "step {step}");
        assert_eq!(span.bool_attr("gpu.energy.estimated"), None);
        let seconds = duration(span).as_secs_f64();
        assert_eq!(span.double_attr("gpu.power.avg"), Some(joules / seconds));
        assert_eq!(
            span.double_attr("gpu.energy.per_sample"),
            Some(joules / 7.0)
        );
        // 280 W over three or four quanta.
        assert!(
            [84.0, 112.0].contains(&joules),
            "step {step}: {joules} J is not a whole number of 28 J quanta in the span"
        );
    }
}

#[test]
fn a_span_shorter_than_the_counter_s_period_is_estimated_within_5_percent() {
    let fake = FakeNvml::build();
    fake.set_power(0, 250_000);
    let receiver = Receiver::start_http();
    let (telemetry, ()) = sampling::run(builder(&receiver, &fake), |_| {
        // The counter has moved twice: its period is known.
        just_after_a_move(&fake);
        just_after_a_move(&fake);
        for step in 0..5 {
            let _step = gpuspan::step_span!(step);
            std::thread::sleep(Duration::from_millis(30));
        }
    });
    telemetry.shutdown().expect("clean shutdown");

    let steps = receiver.spans_named("step");
    assert_eq!(steps.len(), 5);
    for span in &steps {
        let scripted = 250.0 * duration(span).as_secs_f64();
        let energy = span.double_attr("gpu.energy").expect("an estimate");
        assert_eq!(span.bool_attr("gpu.energy.estimated"), Some(true));
        assert!(
            (energy - scripted).abs() <= 0.05 * scripted,
            "{energy} J against the scripted {scripted} J"
        );
    }
}

#[test]
fn a_driver_reload_while_a_span_is_open_gives_it_no_energy() {
    let fake = FakeNvml::build();
    let receiver = Receiver::start_grpc();
    let (telemetry, ()) = sampling::run(builder(&receiver, &fake), |_| {
        just_after_a_move(&fake);
        {
            let _step = gpuspan::step_span!(0);
            wait_for_power_reads(&fake, 1, 2);
            fake.reload_driver();
            std::thread::sleep(3 * ENERGY_QUANTUM);
            wait_for_power_reads(&fake, 1, 2);
        }
        // The next span, after the reload, has its figure again.
        let _step = gpuspan::step_span!(1);
        std::thread::sleep(3 * ENERGY_QUANTUM);
        wait_for_power_reads(&fake, 1, 2);
    });
    telemetry.shutdown().expect("clean shutdown");

    let steps = receiver.spans_named("step");
    let step = |n: i64| step_span(&steps, n);
    assert_eq!(step(0).double_attr("gpu.energy"), None);
    assert_eq!(step(0).double_attr("gpu.power.avg"), None);
    let after = step(1)
        .double_attr("gpu.energy")
        .expect("a figure after the reload");
    assert!(after > 0.0, "{after}");
}

#[test]
fn steps_10_to_12_and_only_they_carry_the_scripted_throttle_reasons() {
    let fake = FakeNvml::build();
    let receiver = Receiver::start_grpc();
    let throttling = Throttling {
        held: 10..=12,
        reasons: &["sw_power_cap", "hw_slowdown"],
        held_mhz: 1200,
        free_mhz: 1980,
    };
    let (telemetry, ()) = sampling::run(builder(&receiver, &fake), |_| {
        for step in 0..15 {
            let reasons = if throttling.holds(step) {
                reason::SW_POWER_CAP | reason::HW_SLOWDOWN
            } else {
                reason::GPU_IDLE
            };
            fake.set_clocks_event_reasons(0, reasons);
            fake.set_sm_clock(0, throttling.mhz(step) as u32);
            // A reading of the new state is the latest as the step opens.
            wait_for_power_reads(&fake, 1, 1);
            let _step = gpuspan::step_span!(step);
            wait_for_power_reads(&fake, 1, 2);
        }
    });
    telemetry.shutdown().expect("clean shutdown");

    let steps = receiver.spans_named("step");
    assert_eq!(steps.len(), 15);
    for span in &steps {
        throttling.assert_span(span);
    }
}

#[test]
fn a_mig_instance_s_span_carries_its_gpu_s_energy_once_and_says_so() {
    let fake = FakeNvml::build();
    fake.set_mig(0, 2, 20 << 30);
    fake.set_power(0, 300_000);
    let receiver = Receiver::start_grpc();
    let builder = setup::to_receiver(&receiver)
        .nvml_lib(fake.path())
        .sample_interval(Duration::from_millis(2));
    let (telemetry, counted) = sampling::run(builder, |telemetry| {
        assert_eq!(telemetry.devices().len(), 2, "two instances of one GPU");
        let start = just_after_a_move(&fake);
        let span = gpuspan::step_span!(0);
        let still = fake.current_energy(0) == start;
        std::thread::sleep(2 * ENERGY_QUANTUM + ENERGY_QUANTUM / 2);
        let end = just_after_a_move(&fake);
        drop(span);
        // A machine too busy to read within one quantum is not judged.
        (still && fake.current_energy(0) == end).then_some(end - start)
    });
    telemetry.shutdown().expect("clean shutdown");

    let step = &receiver.spans_named("step")[0];
    assert_eq!(step.str_attr("gpu.energy.scope"), Some("gpu"));
    match counted {
        Some(millijoules) => assert_eq!(
            step.double_attr("gpu.energy"),
            Some(millijoules as f64 / 1000.0),
            "the GPU's counter once, not once per instance"
        ),
        None => eprintln!("not read within one quantum: the figure is not judged"),
    }
}

#[test]
fn gpuspan_power_interval_sets_how_often_energy_is_read_apart_from_memory() {
    let fake = FakeNvml::build();
    let receiver = Receiver::start_grpc();
    let telemetry = builder(&receiver, &fake)
        .power_interval(Duration::from_millis(250))
        .build()
        .unwrap();
    // The first read after start, then a window of about a second.
    wait_for_power_reads(&fake, 1, 0);
    let (energy_before, memory_before) = (
        fake.call_count(ENERGY),
        fake.call_count("nvmlDeviceGetMemoryInfo_v2"),
    );
    let started = Instant::now();
    std::thread::sleep(Duration::from_secs(1));
    let window = started.elapsed();
    let energy_reads = fake.call_count(ENERGY) - energy_before;
    let memory_reads = fake.call_count("nvmlDeviceGetMemoryInfo_v2") - memory_before;
    telemetry.shutdown().unwrap();

    // Never more often than every 250 ms (a loaded machine may read less often).
    let most = window.as_millis() as u64 / 250 + 1;
    assert!(
        (1..=most).contains(&energy_reads),
        "{energy_reads} energy reads in {window:?} at a 250 ms power interval"
    );
    assert!(
        memory_reads > energy_reads * 5,
        "memory kept its own 2 ms cadence: {memory_reads} reads against {energy_reads}"
    );
}

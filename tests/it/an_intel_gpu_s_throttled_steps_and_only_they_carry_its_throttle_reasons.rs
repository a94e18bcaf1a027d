//! An Intel GPU's driver says why it holds the clock down (xe's `freq0/throttle/reason_*`
//! files): the steps that ran while it did, and only they, carry those reasons in the
//! vocabulary NVIDIA's spans use, the share of readings held down, the lowest graphics
//! clock and one `gpu.throttled` event. The machine is a tree written by the test.

use gpuspan_test_support as support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use gpuspan::Telemetry;
use support::receiver::Receiver;
use support::setup;

/// Several of the sampler's 20 ms power reads.
const SETTLE: Duration = Duration::from_millis(120);

/// Writes aside and renames, so a read never sees half a file.
fn replace(path: &Path, text: &str) {
    let aside = path.with_extension("new");
    std::fs::write(&aside, text).unwrap();
    std::fs::rename(&aside, path).unwrap();
}

/// An xe card with its energy counter and GT 0's throttle files.
fn xe_machine(root: &Path) -> PathBuf {
    let device = root.join("sys/class/drm/card0/device");
    let hwmon = device.join("hwmon/hwmon5");
    std::fs::create_dir_all(&hwmon).unwrap();
    std::fs::write(
        device.join("uevent"),
        "DRIVER=xe\nPCI_ID=8086:E20B\nPCI_SLOT_NAME=0000:03:00.0\n",
    )
    .unwrap();
    std::fs::write(hwmon.join("energy1_input"), "123456789\n").unwrap();
    let freq = device.join("tile0/gt0/freq0");
    std::fs::create_dir_all(freq.join("throttle")).unwrap();
    std::fs::create_dir_all(root.join(format!("proc/{}/fdinfo", std::process::id()))).unwrap();
    freq
}

/// The driver holds the clock down for `reasons` (none: it does not) at `mhz`.
fn set(freq: &Path, reasons: &[&str], mhz: u64) {
    let throttle = freq.join("throttle");
    let status = if reasons.is_empty() { "0" } else { "1" };
    replace(&throttle.join("status"), &format!("{status}\n"));
    for reason in [
        "pl1",
        "pl2",
        "pl4",
        "thermal",
        "prochot",
        "ratl",
        "vr_thermalert",
        "vr_tdc",
    ] {
        let held = if reasons.contains(&reason) { "1" } else { "0" };
        replace(
            &throttle.join(format!("reason_{reason}")),
            &format!("{held}\n"),
        );
    }
    replace(&freq.join("act_freq"), &format!("{mhz}\n"));
}

/// Sleeps `time`; whether the sampler kept its cadence meanwhile.
fn settle(telemetry: &Telemetry, time: Duration) -> bool {
    let before = telemetry.sampler_stats().expect("a sampler").max_gap;
    std::thread::sleep(time);
    let after = telemetry.sampler_stats().expect("a sampler").max_gap;
    after == before || after < time / 2
}

#[test]
fn steps_2_and_3_and_only_they_carry_the_power_limit_and_thermal_reasons() {
    let root = tempfile::tempdir().unwrap();
    let freq = xe_machine(root.path());
    set(&freq, &[], 2400);
    let throttled = 2..=3;
    let receiver = Receiver::start_grpc();
    let builder = setup::to_receiver(&receiver)
        .sysfs_root(root.path().join("sys"))
        .procfs_root(root.path().join("proc"))
        .sample_interval(Duration::from_millis(2));
    let (telemetry, on_time) = setup::run(builder, |telemetry| {
        let mut on_time = Vec::new();
        for step in 0..6i64 {
            if throttled.contains(&step) {
                set(&freq, &["pl1", "thermal"], 1100 + step as u64);
            } else {
                set(&freq, &[], 2400);
            }
            // A reading of the new state is the latest as the step opens.
            let mut kept = settle(telemetry, SETTLE);
            let _step = gpuspan::step_span!(step);
            kept &= settle(telemetry, SETTLE);
            on_time.push(kept);
        }
        on_time
    });
    telemetry.shutdown().expect("clean shutdown");

    let steps = receiver.spans_named("step");
    assert_eq!(steps.len(), 6);
    let judged = on_time.iter().filter(|&&kept| kept).count();
    assert!(judged >= 4, "too busy a machine to judge: {on_time:?}");
    for span in &steps {
        let step = span.int_attr("ml.step").unwrap();
        if !on_time[step as usize] {
            eprintln!("step {step}: the sampler fell behind: not judged");
            continue;
        }
        let events = span.events_named("gpu.throttled");
        if throttled.contains(&step) {
            assert_eq!(
                span.strs_attr("gpu.throttle.reasons"),
                Some(vec!["sw_power_cap", "sw_thermal_slowdown"]),
                "step {step}"
            );
            assert_eq!(span.double_attr("gpu.throttle.share"), Some(1.0));
            assert_eq!(span.int_attr("gpu.clock.sm.min"), Some(1100 + step));
            assert_eq!(events.len(), 1, "step {step}");
        } else {
            assert_eq!(span.strs_attr("gpu.throttle.reasons"), None, "step {step}");
            assert_eq!(span.double_attr("gpu.throttle.share"), Some(0.0));
            assert_eq!(span.int_attr("gpu.clock.sm.min"), Some(2400));
            assert!(events.is_empty(), "step {step}");
        }
    }
}

#[test]
fn an_integrated_gpu_without_an_energy_counter_still_carries_its_reasons() {
    let root = tempfile::tempdir().unwrap();
    let device = root.path().join("sys/class/drm/card0/device");
    std::fs::create_dir_all(&device).unwrap();
    std::fs::write(
        device.join("uevent"),
        "DRIVER=i915\nPCI_ID=8086:A7A0\nPCI_SLOT_NAME=0000:00:02.0\n",
    )
    .unwrap();
    std::fs::create_dir_all(
        root.path()
            .join(format!("proc/{}/fdinfo", std::process::id())),
    )
    .unwrap();
    let gt = root.path().join("sys/class/drm/card0/gt/gt0");
    std::fs::create_dir_all(&gt).unwrap();
    let set = |held: bool| {
        let flag = if held { "1\n" } else { "0\n" };
        replace(&gt.join("throttle_reason_status"), flag);
        replace(&gt.join("throttle_reason_thermal"), flag);
        replace(&gt.join("throttle_reason_pl1"), "0\n");
        replace(
            &gt.join("rps_act_freq_mhz"),
            if held { "650\n" } else { "1450\n" },
        );
    };
    set(false);
    let receiver = Receiver::start_grpc();
    let builder = setup::to_receiver(&receiver)
        .sysfs_root(root.path().join("sys"))
        .procfs_root(root.path().join("proc"))
        .sample_interval(Duration::from_millis(2));
    let (telemetry, on_time) = setup::run(builder, |telemetry| {
        let mut on_time = settle(telemetry, SETTLE);
        for step in 0..2i64 {
            set(step == 1);
            on_time &= settle(telemetry, SETTLE);
            let _step = gpuspan::step_span!(step);
            on_time &= settle(telemetry, SETTLE);
        }
        on_time
    });
    telemetry.shutdown().expect("clean shutdown");

    if !on_time {
        eprintln!("the sampler fell behind: not judged");
        return;
    }
    let steps = receiver.spans_named("step");
    let step = |n: i64| {
        steps
            .iter()
            .find(|s| s.int_attr("ml.step") == Some(n))
            .unwrap()
    };
    assert_eq!(
        step(0).double_attr("gpu.energy"),
        None,
        "no hwmon, no energy"
    );
    assert_eq!(step(0).double_attr("gpu.throttle.share"), Some(0.0));
    assert_eq!(step(0).int_attr("gpu.clock.sm.min"), Some(1450));
    assert_eq!(
        step(1).strs_attr("gpu.throttle.reasons"),
        Some(vec!["sw_thermal_slowdown"])
    );
    assert_eq!(step(1).double_attr("gpu.throttle.share"), Some(1.0));
    assert_eq!(step(1).int_attr("gpu.clock.sm.min"), Some(650));
    assert_eq!(step(1).events_named("gpu.throttled").len(), 1);
}

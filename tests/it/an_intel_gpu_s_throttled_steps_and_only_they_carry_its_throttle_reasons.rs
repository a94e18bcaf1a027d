//! An Intel GPU's driver says why it holds the clock down (xe's `freq0/throttle/reason_*`
//! files): the steps that ran while it did, and only they, carry those reasons in the
//! vocabulary NVIDIA's spans use, the share of readings held down, the lowest graphics
//! clock and one `gpu.throttled` event. The machine is a tree written by the test.

use gpuspan_test_support as support;

use std::path::{Path, PathBuf};

use support::cadence::{settle, SETTLE};
use support::receiver::Receiver;
use support::sampling::step_span;
use support::setup;
use support::throttle::{run_six_steps, POWER_AND_THERMAL_THROUGH_STEPS_2_AND_3};

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

#[test]
fn steps_2_and_3_and_only_they_carry_the_power_limit_and_thermal_reasons() {
    let root = tempfile::tempdir().unwrap();
    let freq = xe_machine(root.path());
    set(&freq, &[], 2400);
    let receiver = Receiver::start_grpc();
    let builder = setup::on_written_machine(&receiver, root.path());
    let throttling = &POWER_AND_THERMAL_THROUGH_STEPS_2_AND_3;
    run_six_steps(builder, &receiver, "drm-fdinfo", throttling, |held, mhz| {
        let reasons: &[&str] = if held { &["pl1", "thermal"] } else { &[] };
        set(&freq, reasons, mhz as u64);
    });
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
    let builder = setup::on_written_machine(&receiver, root.path());
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
    let step = |n: i64| step_span(&steps, n);
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

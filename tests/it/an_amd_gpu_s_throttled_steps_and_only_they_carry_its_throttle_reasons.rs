//! An AMD GPU's driver says why it holds the clock down in its binary `gpu_metrics` table
//! (the ASIC-independent throttler bits): the steps that ran while it did, and only they,
//! carry those reasons in the vocabulary NVIDIA's spans use, the share of readings held
//! down, the lowest graphics clock and one `gpu.throttled` event. The machine is a tree
//! written by the test, its table laid out as the kernel's `struct gpu_metrics_v1_3`.

use gpuspan_test_support as support;

use std::path::{Path, PathBuf};

use support::cadence::{settle, SETTLE};
use support::receiver::Receiver;
use support::setup;
use support::throttle::{run_six_steps, POWER_AND_THERMAL_THROUGH_STEPS_2_AND_3};

/// `sizeof(struct gpu_metrics_v1_3)`, and where its fields read here are: a header
/// (`structure_size` u16, `format_revision` u8, `content_revision` u8), then temperatures,
/// activities and the socket power (u16 each, 4 to 24), the energy counter and the
/// timestamp (u64, 24 and 32), the seven average clocks (u16, 40 to 52), the seven current
/// clocks (u16, 54 to 66), and, after the fans, links, accumulators, HBM temperatures,
/// firmware timestamp and voltages, `indep_throttle_status` (u64) at 112.
const SIZE: usize = 120;
const AVERAGE_GFXCLK: usize = 40;
const CURRENT_GFXCLK: usize = 54;
const INDEP_THROTTLE_STATUS: usize = 112;

/// `SMU_THROTTLER_PPT0_BIT` and `SMU_THROTTLER_TEMP_HOTSPOT_BIT`.
const PPT0: u64 = 1 << 0;
const TEMP_HOTSPOT: u64 = 1 << 36;

/// Writes aside and renames, so a read never sees half a file.
fn replace(path: &Path, bytes: &[u8]) {
    let aside = path.with_extension("new");
    std::fs::write(&aside, bytes).unwrap();
    std::fs::rename(&aside, path).unwrap();
}

/// A discrete AMD GPU with its memory files; returns its `gpu_metrics` path.
fn amd_machine(root: &Path) -> PathBuf {
    let device = root.join("sys/class/drm/card0/device");
    std::fs::create_dir_all(&device).unwrap();
    std::fs::write(
        device.join("uevent"),
        "DRIVER=amdgpu\nPCI_ID=1002:744C\nPCI_SLOT_NAME=0000:03:00.0\n",
    )
    .unwrap();
    std::fs::write(device.join("mem_info_vram_used"), "402653184\n").unwrap();
    std::fs::write(device.join("mem_info_vram_total"), "25753026560\n").unwrap();
    std::fs::create_dir_all(root.join(format!("proc/{}/fdinfo", std::process::id()))).unwrap();
    device.join("gpu_metrics")
}

/// The driver's table: held down by `bits` at `mhz`, every field not set here all ones
/// (not filled), as the driver leaves them.
fn set(metrics: &Path, bits: u64, mhz: u16) {
    let mut table = vec![0xff_u8; SIZE];
    table[..2].copy_from_slice(&(SIZE as u16).to_le_bytes());
    table[2] = 1;
    table[3] = 3;
    table[CURRENT_GFXCLK..CURRENT_GFXCLK + 2].copy_from_slice(&mhz.to_le_bytes());
    table[AVERAGE_GFXCLK..AVERAGE_GFXCLK + 2].copy_from_slice(&2500u16.to_le_bytes());
    table[INDEP_THROTTLE_STATUS..INDEP_THROTTLE_STATUS + 8].copy_from_slice(&bits.to_le_bytes());
    replace(metrics, &table);
}

#[test]
fn steps_2_and_3_and_only_they_carry_the_power_limit_and_thermal_reasons() {
    let root = tempfile::tempdir().unwrap();
    let metrics = amd_machine(root.path());
    set(&metrics, 0, 2400);
    let receiver = Receiver::start_grpc();
    let builder = setup::on_written_machine(&receiver, root.path());
    let throttling = &POWER_AND_THERMAL_THROUGH_STEPS_2_AND_3;
    run_six_steps(
        builder,
        &receiver,
        "amdgpu-sysfs",
        throttling,
        |held, mhz| {
            let bits = if held { PPT0 | TEMP_HOTSPOT } else { 0 };
            set(&metrics, bits, mhz as u16);
        },
    );
}

#[test]
fn a_table_of_a_revision_not_known_gives_no_reasons_rather_than_wrong_ones() {
    let root = tempfile::tempdir().unwrap();
    let metrics = amd_machine(root.path());
    set(&metrics, PPT0 | TEMP_HOTSPOT, 900);
    // The same bytes under a revision whose layout is not known.
    let mut table = std::fs::read(&metrics).unwrap();
    table[3] = 9;
    replace(&metrics, &table);
    let receiver = Receiver::start_grpc();
    let builder = setup::on_written_machine(&receiver, root.path());
    let (telemetry, ()) = setup::run(builder, |telemetry| {
        settle(telemetry, SETTLE);
        let _step = gpuspan::step_span!(0);
        settle(telemetry, SETTLE);
    });
    telemetry.shutdown().expect("clean shutdown");

    let steps = receiver.spans_named("step");
    assert_eq!(steps[0].strs_attr("gpu.throttle.reasons"), None);
    assert_eq!(steps[0].double_attr("gpu.throttle.share"), None);
    assert_eq!(steps[0].int_attr("gpu.clock.sm.min"), None);
    assert!(steps[0].events_named("gpu.throttled").is_empty());
}

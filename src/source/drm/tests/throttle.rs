//! Why an Intel GPU's clocks are held down, read from its driver's throttle files.

use super::*;
use crate::source::PowerReading;

/// Writes `files` (name, text) into the fixture's `dir`.
fn write(tree: &Tree, dir: &str, files: &[(&str, &str)]) {
    let path = tree.path(dir);
    std::fs::create_dir_all(&path).unwrap();
    for (name, text) in files {
        std::fs::write(path.join(name), text).unwrap();
    }
}

fn read_power(source: &mut DrmSource) -> PowerReading {
    let mut out = vec![PowerReading::default(); source.devices().len()];
    source.read_power(&mut out);
    out.remove(0)
}

#[test]
fn i915_s_reasons_are_read_as_nvml_s_while_its_status_says_the_clock_is_held_down() {
    let tree = Tree::of("i915-system0-local0");
    let gt = "sys/class/drm/card0/gt/gt0";
    let files = [
        ("throttle_reason_status", "1\n"),
        ("throttle_reason_pl2", "1\n"),
        ("throttle_reason_vr_thermalert", "1\n"),
        ("throttle_reason_prochot", "0\n"),
        ("rps_act_freq_mhz", "1300\n"),
    ];
    write(&tree, gt, &files);
    let mut source = tree.open();
    let reading = read_power(&mut source);
    // sw_power_cap and hw_thermal_slowdown.
    assert_eq!(reading.clock_reasons, Some(0x4 | 0x40));
    assert_eq!(reading.sm_clock_mhz, Some(1300));

    // The reason files keep their last values; the status says they no longer hold.
    write(&tree, gt, &[("throttle_reason_status", "0\n")]);
    assert_eq!(read_power(&mut source).clock_reasons, Some(0));
}

#[test]
fn xe_s_lowest_gt_clock_and_every_gt_s_reasons_count() {
    let tree = Tree::of("xe-vram0-gtt");
    let tile = "sys/class/drm/card1/device/tile0";
    write(
        &tree,
        &format!("{tile}/gt0/freq0"),
        &[("act_freq", "2100\n")],
    );
    let files = [("status", "1\n"), ("reason_pl4", "1\n")];
    write(&tree, &format!("{tile}/gt0/freq0/throttle"), &files);
    write(
        &tree,
        &format!("{tile}/gt1/freq0"),
        &[("act_freq", "800\n")],
    );
    let files = [("status", "1\n"), ("reason_ratl", "1\n")];
    write(&tree, &format!("{tile}/gt1/freq0/throttle"), &files);
    let reading = read_power(&mut tree.open());
    // hw_slowdown and sw_thermal_slowdown.
    assert_eq!(reading.clock_reasons, Some(0x8 | 0x20));
    assert_eq!(reading.sm_clock_mhz, Some(800));
}

#[test]
fn a_throttle_file_that_cannot_be_read_leaves_its_figure_out() {
    let tree = Tree::of("xe-vram0-gtt");
    let freq = "sys/class/drm/card1/device/tile0/gt0/freq0";
    write(&tree, freq, &[("act_freq", "fast\n")]);
    write(&tree, &format!("{freq}/throttle"), &[("status", "\n")]);
    let reading = read_power(&mut tree.open());
    assert_eq!((reading.clock_reasons, reading.sm_clock_mhz), (None, None));
}

#[test]
fn i915_s_gt_files_are_found_beside_a_device_link_that_leads_into_sys_devices() {
    // As the kernel lays it out: `class/drm/card0/device` a link to the PCI device, the
    // GTs under `class/drm/card0/gt`.
    let tree = Tree::of("i915-system0-local0");
    let pci = tree.path("sys/devices/pci0000:00/0000:4d:00.0");
    std::fs::create_dir_all(pci.parent().unwrap()).unwrap();
    std::fs::rename(tree.path("sys/class/drm/card0/device"), &pci).unwrap();
    std::os::unix::fs::symlink(
        "../../../devices/pci0000:00/0000:4d:00.0",
        tree.path("sys/class/drm/card0/device"),
    )
    .unwrap();
    let files = [
        ("throttle_reason_status", "1\n"),
        ("throttle_reason_pl2", "1\n"),
        ("rps_act_freq_mhz", "1300\n"),
    ];
    write(&tree, "sys/class/drm/card0/gt/gt0", &files);
    let reading = read_power(&mut tree.open());
    assert_eq!(reading.clock_reasons, Some(0x4));
    assert_eq!(reading.sm_clock_mhz, Some(1300));
}

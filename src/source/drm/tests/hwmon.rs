//! Energy and power from the cards' hwmon files: which file each driver's figure comes
//! from, in which unit, and what happens when one cannot be read.

use std::time::Duration;

use super::*;
use crate::source::PowerReading;

/// Writes `files` (name, text) into `hwmon/<dir>` of the fixture's `card`.
fn hwmon(tree: &Tree, card: &str, dir: &str, files: &[(&str, &str)]) {
    let path = tree.path(&format!("sys/class/drm/{card}/device/hwmon/{dir}"));
    std::fs::create_dir_all(&path).unwrap();
    for (name, text) in files {
        std::fs::write(path.join(name), text).unwrap();
    }
}

fn read_power(source: &mut DrmSource) -> Vec<PowerReading> {
    let mut out = vec![PowerReading::default(); source.devices().len()];
    source.read_power(&mut out);
    out
}

#[test]
fn xe_reads_the_card_s_counter_and_its_power_from_the_counter_s_increase() {
    let tree = Tree::of("xe-vram0-gtt");
    let files = [("energy1_input", "1000000\n"), ("energy2_input", "17\n")];
    hwmon(&tree, "card1", "hwmon4", &files);
    let mut source = tree.open();
    assert_eq!(source.energy_scope(), None);
    let first = &read_power(&mut source)[0];
    assert_eq!(
        first.energy_uj,
        Some(1_000_000),
        "the card's, not the package's"
    );
    assert_eq!(first.power_mw, None, "one read gives no increase yet");

    hwmon(&tree, "card1", "hwmon4", &[("energy1_input", "1500000\n")]);
    std::thread::sleep(Duration::from_millis(50));
    let second = &read_power(&mut source)[0];
    assert_eq!(second.energy_uj, Some(1_500_000));
    // 0.5 J over 50 ms or a little more: 10 W at most.
    let mw = second.power_mw.expect("the power from the increase");
    assert!((2_000..=10_000).contains(&mw), "{mw} mW");
}

#[test]
fn xe_without_the_card_s_counter_reads_the_package_s() {
    let tree = Tree::of("xe-vram0-gtt");
    hwmon(&tree, "card1", "hwmon4", &[("energy2_input", "52\n")]);
    assert_eq!(read_power(&mut tree.open())[0].energy_uj, Some(52));
}

#[test]
fn amdgpu_reads_power1_average_else_power1_input_in_milliwatts() {
    let tree = Tree::of("amdgpu-old-keys");
    let files = [("power1_average", "152499999\n"), ("power1_input", "1\n")];
    hwmon(&tree, "card0", "hwmon1", &files);
    let reading = &read_power(&mut tree.open())[0];
    assert_eq!((reading.energy_uj, reading.power_mw), (None, Some(152_500)));

    let tree = Tree::of("amdgpu-old-keys");
    hwmon(&tree, "card0", "hwmon1", &[("power1_input", "61000000\n")]);
    assert_eq!(read_power(&mut tree.open())[0].power_mw, Some(61_000));
}

#[test]
fn a_file_that_does_not_hold_a_number_gives_no_figure_rather_than_zero() {
    let tree = Tree::of("xe-vram0-gtt");
    hwmon(&tree, "card1", "hwmon4", &[("energy1_input", "12\n")]);
    let mut source = tree.open();
    assert_eq!(read_power(&mut source)[0].energy_uj, Some(12));
    hwmon(&tree, "card1", "hwmon4", &[("energy1_input", "-1\n")]);
    assert_eq!(read_power(&mut source)[0], PowerReading::default());
    std::fs::remove_file(tree.path("sys/class/drm/card1/device/hwmon/hwmon4/energy1_input"))
        .unwrap();
    assert_eq!(read_power(&mut source)[0], PowerReading::default());
}

#[test]
fn a_counter_that_went_back_gives_a_reading_but_no_power_from_the_increase() {
    let tree = Tree::of("xe-vram0-gtt");
    hwmon(&tree, "card1", "hwmon4", &[("energy1_input", "9000\n")]);
    let mut source = tree.open();
    read_power(&mut source);
    hwmon(&tree, "card1", "hwmon4", &[("energy1_input", "40\n")]);
    let reading = &read_power(&mut source)[0];
    // The sampler sees the counter go back and gives the spans open across it no figure.
    assert_eq!((reading.energy_uj, reading.power_mw), (Some(40), None));
}

#[test]
fn an_apu_is_told_by_the_north_bridge_rail_its_driver_shows_on_apus_alone() {
    let tree = Tree::of("apu-without-vram-keys");
    let files = [
        ("in1_label", "vddnb\n"),
        ("in1_input", "892\n"),
        ("power1_average", "28000000\n"),
    ];
    hwmon(&tree, "card0", "hwmon0", &files);
    assert_eq!(tree.open().energy_scope(), Some("socket"));

    let tree = Tree::of("amdgpu-old-keys");
    let files = [("in0_label", "vddgfx\n"), ("power1_average", "300000000\n")];
    hwmon(&tree, "card0", "hwmon1", &files);
    assert_eq!(tree.open().energy_scope(), None, "a discrete GPU");
}

#[test]
fn a_gpu_s_partitions_count_its_power_once_and_say_it_is_the_whole_gpu_s() {
    let tree = Tree::of("mi300x-four-compute-partitions");
    hwmon(
        &tree,
        "card0",
        "hwmon2",
        &[("power1_average", "750000000\n")],
    );
    let mut source = tree.open();
    assert_eq!(source.devices().len(), 4);
    assert_eq!(source.energy_scope(), Some("gpu"));
    let powers: Vec<Option<u64>> = read_power(&mut source).iter().map(|r| r.power_mw).collect();
    assert_eq!(powers, [Some(750_000), None, None, None]);
}

#[test]
fn a_card_without_hwmon_files_reads_no_energy_and_no_power() {
    let tree = Tree::of("amdgpu-old-keys");
    hwmon(&tree, "card0", "hwmon1", &[("temp1_input", "45000\n")]);
    let mut source = tree.open();
    assert_eq!(read_power(&mut source)[0], PowerReading::default());
    assert_eq!(source.energy_scope(), None);
}

#[test]
fn a_counter_that_leaps_past_what_any_gpu_draws_gives_no_figure_and_then_counts_on() {
    let tree = Tree::of("xe-vram0-gtt");
    hwmon(&tree, "card1", "hwmon4", &[("energy1_input", "1000000\n")]);
    let mut source = tree.open();
    read_power(&mut source);
    // 10^15 µJ more within 50 ms: 20 GW.
    hwmon(
        &tree,
        "card1",
        "hwmon4",
        &[("energy1_input", "1000000001000000\n")],
    );
    std::thread::sleep(Duration::from_millis(50));
    let leap = &read_power(&mut source)[0];
    assert_eq!((leap.energy_uj, leap.power_mw), (None, None));
    // The next read counts from the new value.
    hwmon(
        &tree,
        "card1",
        "hwmon4",
        &[("energy1_input", "1000000001500000\n")],
    );
    std::thread::sleep(Duration::from_millis(50));
    let next = &read_power(&mut source)[0];
    assert_eq!(next.energy_uj, Some(1_000_000_001_500_000));
    let mw = next.power_mw.expect("the power from the increase");
    assert!((2_000..=10_000).contains(&mw), "{mw} mW");
}

#[test]
fn a_power_file_past_what_any_gpu_draws_gives_no_figure() {
    let tree = Tree::of("amdgpu-old-keys");
    hwmon(
        &tree,
        "card0",
        "hwmon1",
        &[("power1_average", "100000000001\n")],
    );
    let mut source = tree.open();
    assert_eq!(read_power(&mut source)[0].power_mw, None);
    // 100 kW is still read.
    hwmon(
        &tree,
        "card0",
        "hwmon1",
        &[("power1_average", "100000000000\n")],
    );
    assert_eq!(read_power(&mut source)[0].power_mw, Some(100_000_000));
}

#[test]
fn a_hwmon_directory_that_goes_away_gives_no_figure_until_it_is_back() {
    let tree = Tree::of("xe-vram0-gtt");
    hwmon(&tree, "card1", "hwmon4", &[("energy1_input", "1000000\n")]);
    let mut source = tree.open();
    read_power(&mut source);
    let dir = tree.path("sys/class/drm/card1/device/hwmon/hwmon4");
    std::fs::remove_dir_all(&dir).unwrap();
    let gone = &read_power(&mut source)[0];
    assert_eq!((gone.energy_uj, gone.power_mw), (None, None));
    hwmon(&tree, "card1", "hwmon4", &[("energy1_input", "3000000\n")]);
    let back = &read_power(&mut source)[0];
    assert_eq!(back.energy_uj, Some(3_000_000));
    assert_eq!(back.power_mw, None, "no increase across the gap");
}

#[test]
fn a_hwmon_directory_back_under_another_number_is_read_again() {
    // A driver reload registers the card's hwmon afresh, under the next free number.
    let tree = Tree::of("xe-vram0-gtt");
    hwmon(&tree, "card1", "hwmon4", &[("energy1_input", "1000000\n")]);
    let mut source = tree.open();
    assert_eq!(read_power(&mut source)[0].energy_uj, Some(1_000_000));
    let dir = tree.path("sys/class/drm/card1/device/hwmon/hwmon4");
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(read_power(&mut source)[0].energy_uj, None);
    hwmon(&tree, "card1", "hwmon9", &[("energy1_input", "2000\n")]);
    // Looked for again at most once a second while it is gone.
    std::thread::sleep(Duration::from_millis(1100));
    let found = &read_power(&mut source)[0];
    assert_eq!(
        (found.energy_uj, found.power_mw),
        (None, None),
        "a new counter: nothing counted across the reload"
    );
    let back = &read_power(&mut source)[0];
    assert_eq!(back.energy_uj, Some(2_000));
    hwmon(&tree, "card1", "hwmon9", &[("energy1_input", "502000\n")]);
    std::thread::sleep(Duration::from_millis(50));
    let mw = read_power(&mut source)[0]
        .power_mw
        .expect("the power again");
    assert!((2_000..=10_000).contains(&mw), "{mw} mW");
}

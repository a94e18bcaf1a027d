//! Why an AMD GPU's clocks are held down, read from the binary `gpu_metrics` table its
//! driver writes. The tables are built here from the kernel's structs: the fields in
//! order, each at its natural alignment, as the kernel's compiler lays them out.

use super::*;
use crate::source::PowerReading;

/// One field of a kernel struct: its name, the size of one element, how many.
type Field = (&'static str, usize, usize);

/// `struct gpu_metrics_v1_3`, a discrete GPU's (Aldebaran, Navi 3x).
const V1_3: [Field; 41] = [
    ("header", 4, 1),
    ("temperature_edge", 2, 1),
    ("temperature_hotspot", 2, 1),
    ("temperature_mem", 2, 1),
    ("temperature_vrgfx", 2, 1),
    ("temperature_vrsoc", 2, 1),
    ("temperature_vrmem", 2, 1),
    ("average_gfx_activity", 2, 1),
    ("average_umc_activity", 2, 1),
    ("average_mm_activity", 2, 1),
    ("average_socket_power", 2, 1),
    ("energy_accumulator", 8, 1),
    ("system_clock_counter", 8, 1),
    ("average_gfxclk_frequency", 2, 1),
    ("average_socclk_frequency", 2, 1),
    ("average_uclk_frequency", 2, 1),
    ("average_vclk0_frequency", 2, 1),
    ("average_dclk0_frequency", 2, 1),
    ("average_vclk1_frequency", 2, 1),
    ("average_dclk1_frequency", 2, 1),
    ("current_gfxclk", 2, 1),
    ("current_socclk", 2, 1),
    ("current_uclk", 2, 1),
    ("current_vclk0", 2, 1),
    ("current_dclk0", 2, 1),
    ("current_vclk1", 2, 1),
    ("current_dclk1", 2, 1),
    ("throttle_status", 4, 1),
    ("current_fan_speed", 2, 1),
    ("pcie_link_width", 2, 1),
    ("pcie_link_speed", 2, 1),
    ("padding", 2, 1),
    ("gfx_activity_acc", 4, 1),
    ("mem_activity_acc", 4, 1),
    ("temperature_hbm", 2, 4),
    ("firmware_timestamp", 8, 1),
    ("voltage_soc", 2, 1),
    ("voltage_gfx", 2, 1),
    ("voltage_mem", 2, 1),
    ("padding1", 2, 1),
    ("indep_throttle_status", 8, 1),
];

/// `struct gpu_metrics_v2_2`, an APU's (Van Gogh, Rembrandt); 2.3 and 2.4 add fields
/// after its last.
const V2_2: [Field; 31] = [
    ("header", 4, 1),
    ("temperature_gfx", 2, 1),
    ("temperature_soc", 2, 1),
    ("temperature_core", 2, 8),
    ("temperature_l3", 2, 2),
    ("average_gfx_activity", 2, 1),
    ("average_mm_activity", 2, 1),
    ("system_clock_counter", 8, 1),
    ("average_socket_power", 2, 1),
    ("average_cpu_power", 2, 1),
    ("average_soc_power", 2, 1),
    ("average_gfx_power", 2, 1),
    ("average_core_power", 2, 8),
    ("average_gfxclk_frequency", 2, 1),
    ("average_socclk_frequency", 2, 1),
    ("average_uclk_frequency", 2, 1),
    ("average_fclk_frequency", 2, 1),
    ("average_vclk_frequency", 2, 1),
    ("average_dclk_frequency", 2, 1),
    ("current_gfxclk", 2, 1),
    ("current_socclk", 2, 1),
    ("current_uclk", 2, 1),
    ("current_fclk", 2, 1),
    ("current_vclk", 2, 1),
    ("current_dclk", 2, 1),
    ("current_coreclk", 2, 8),
    ("current_l3clk", 2, 2),
    ("throttle_status", 4, 1),
    ("fan_pwm", 2, 1),
    ("padding", 2, 3),
    ("indep_throttle_status", 8, 1),
];

/// `struct gpu_metrics_v1_1`, an older discrete GPU's: the ASIC's own status only.
const V1_1: [Field; 35] = [
    ("header", 4, 1),
    ("temperature_edge", 2, 1),
    ("temperature_hotspot", 2, 1),
    ("temperature_mem", 2, 1),
    ("temperature_vrgfx", 2, 1),
    ("temperature_vrsoc", 2, 1),
    ("temperature_vrmem", 2, 1),
    ("average_gfx_activity", 2, 1),
    ("average_umc_activity", 2, 1),
    ("average_mm_activity", 2, 1),
    ("average_socket_power", 2, 1),
    ("energy_accumulator", 8, 1),
    ("system_clock_counter", 8, 1),
    ("average_gfxclk_frequency", 2, 1),
    ("average_socclk_frequency", 2, 1),
    ("average_uclk_frequency", 2, 1),
    ("average_vclk0_frequency", 2, 1),
    ("average_dclk0_frequency", 2, 1),
    ("average_vclk1_frequency", 2, 1),
    ("average_dclk1_frequency", 2, 1),
    ("current_gfxclk", 2, 1),
    ("current_socclk", 2, 1),
    ("current_uclk", 2, 1),
    ("current_vclk0", 2, 1),
    ("current_dclk0", 2, 1),
    ("current_vclk1", 2, 1),
    ("current_dclk1", 2, 1),
    ("throttle_status", 4, 1),
    ("current_fan_speed", 2, 1),
    ("pcie_link_width", 2, 1),
    ("pcie_link_speed", 2, 1),
    ("padding", 2, 1),
    ("gfx_activity_acc", 4, 1),
    ("mem_activity_acc", 4, 1),
    ("temperature_hbm", 2, 4),
];

/// A table as the driver writes it: every field all ones (not filled) until set.
struct Table {
    fields: &'static [Field],
    bytes: Vec<u8>,
}

impl Table {
    fn new(fields: &'static [Field], format: u8, content: u8) -> Self {
        let size = lay_out(fields).1;
        let mut table = Self {
            fields,
            bytes: vec![0xff; size],
        };
        // The header: structure_size (u16), format_revision and content_revision (u8).
        table.bytes[..2].copy_from_slice(&(size as u16).to_le_bytes());
        table.bytes[2] = format;
        table.bytes[3] = content;
        table
    }

    fn set(mut self, name: &str, value: u64) -> Self {
        let (_, at, size) = *lay_out(self.fields)
            .0
            .iter()
            .find(|(field, ..)| *field == name)
            .expect("a field of the struct");
        self.bytes[at..at + size].copy_from_slice(&value.to_le_bytes()[..size]);
        self
    }

    fn write(&self, tree: &Tree) {
        std::fs::write(tree.path(METRICS), &self.bytes).unwrap();
    }
}

/// Each field's offset and size, and the struct's size: each field at the next multiple
/// of its own size, the whole padded to a multiple of its widest field's.
fn lay_out(fields: &[Field]) -> (Vec<(&'static str, usize, usize)>, usize) {
    let (mut at, mut widest) = (0usize, 1usize);
    let mut placed = Vec::new();
    for &(name, size, count) in fields {
        at = at.next_multiple_of(size);
        widest = widest.max(size);
        placed.push((name, at, size));
        at += size * count;
    }
    (placed, at.next_multiple_of(widest))
}

const METRICS: &str = "sys/class/drm/card0/device/gpu_metrics";

fn read_power(source: &mut DrmSource) -> PowerReading {
    let mut out = vec![PowerReading::default(); source.devices().len()];
    source.read_power(&mut out);
    out.remove(0)
}

/// The reading of `table` on an amdgpu card.
fn reading_of(table: &Table) -> PowerReading {
    let tree = Tree::of("amdgpu-both-keys");
    table.write(&tree);
    read_power(&mut tree.open())
}

#[test]
fn the_layouts_built_here_have_the_kernel_s_sizes() {
    // sizeof(struct gpu_metrics_v1_1), v1_3 and v2_2.
    assert_eq!(lay_out(&V1_1).1, 96);
    assert_eq!(lay_out(&V1_3).1, 120);
    assert_eq!(lay_out(&V2_2).1, 128);
}

#[test]
fn a_discrete_gpu_s_power_and_temperature_limits_are_nvml_s_power_cap_and_thermal_slowdown() {
    let table = Table::new(&V1_3, 1, 3)
        // SMU_THROTTLER_PPT0_BIT and SMU_THROTTLER_TEMP_HOTSPOT_BIT.
        .set("indep_throttle_status", 1 << 0 | 1 << 36)
        // The ASIC's own bits, which mean something else on every ASIC: not read.
        .set("throttle_status", 0xffff_0000)
        .set("current_gfxclk", 1850)
        .set("average_gfxclk_frequency", 1790);
    let reading = reading_of(&table);
    assert_eq!(reading.clock_reasons, Some(0x4 | 0x20));
    assert_eq!(reading.sm_clock_mhz, Some(1850));
}

#[test]
fn an_apu_s_current_regulator_and_prochot_limits_are_nvml_s_hardware_slowdowns() {
    let table = Table::new(&V2_2, 2, 2)
        // TDC_GFX, TEMP_VR_GFX and PROCHOT_GFX.
        .set("indep_throttle_status", 1 << 16 | 1 << 38 | 1 << 47)
        .set("current_gfxclk", 600);
    let reading = reading_of(&table);
    assert_eq!(reading.clock_reasons, Some(0x8 | 0x40));
    assert_eq!(reading.sm_clock_mhz, Some(600));
}

#[test]
fn every_group_of_independent_bits_has_its_reason() {
    let cases: [(u64, u64); 9] = [
        (1 << 7, 0x4),   // SPPT_APU
        (1 << 56, 0x4),  // PPM
        (1 << 21, 0x8),  // EDC_CPU
        (1 << 23, 0x8),  // APCC
        (1 << 42, 0x20), // TEMP_LIQUID0
        (1 << 37, 0x20), // TEMP_SOC
        (1 << 41, 0x40), // TEMP_VR_MEM1
        (1 << 44, 0x40), // VRHOT0
        (1 << 57, 0),    // FIT: no NVML reason
    ];
    for (bits, reasons) in cases {
        let table = Table::new(&V2_2, 2, 2).set("indep_throttle_status", bits);
        assert_eq!(reading_of(&table).clock_reasons, Some(reasons), "{bits:#x}");
    }
    let calm = Table::new(&V1_3, 1, 3).set("indep_throttle_status", 0);
    assert_eq!(reading_of(&calm).clock_reasons, Some(0));
}

#[test]
fn fields_the_asic_does_not_fill_give_no_figure() {
    // Every field all ones but the average clock: no reasons, the average for the clock.
    let table = Table::new(&V1_3, 1, 3).set("average_gfxclk_frequency", 1290);
    let reading = reading_of(&table);
    assert_eq!(reading.clock_reasons, None);
    assert_eq!(reading.sm_clock_mhz, Some(1290));
    // A graphics block powered off reads 0: no clock it is held down to.
    let off = Table::new(&V2_2, 2, 2)
        .set("current_gfxclk", 0)
        .set("average_gfxclk_frequency", 0);
    assert_eq!(reading_of(&off).sm_clock_mhz, None);
}

#[test]
fn an_older_revision_gives_the_clock_and_no_reasons() {
    let table = Table::new(&V1_1, 1, 1)
        .set("throttle_status", 0x1)
        .set("current_gfxclk", 1400);
    let reading = reading_of(&table);
    assert_eq!(reading.clock_reasons, None);
    assert_eq!(reading.sm_clock_mhz, Some(1400));
}

#[test]
fn an_unknown_revision_a_wrong_size_or_a_short_file_gives_nothing() {
    let held = |table: Table| {
        table
            .set("indep_throttle_status", 1)
            .set("current_gfxclk", 900)
    };
    // A revision not known here, with 1.3's layout.
    let mut unknown = held(Table::new(&V1_3, 1, 9));
    let tree = Tree::of("amdgpu-both-keys");
    unknown.write(&tree);
    let mut source = tree.open();
    let reading = read_power(&mut source);
    assert_eq!((reading.clock_reasons, reading.sm_clock_mhz), (None, None));
    // 1.3 whose header says another size.
    unknown.bytes[2..4].copy_from_slice(&[1, 3]);
    unknown.bytes[..2].copy_from_slice(&128u16.to_le_bytes());
    unknown.write(&tree);
    let reading = read_power(&mut source);
    assert_eq!((reading.clock_reasons, reading.sm_clock_mhz), (None, None));
    // Cut short of its last field.
    let mut short = held(Table::new(&V1_3, 1, 3));
    short.bytes.truncate(116);
    short.write(&tree);
    let reading = read_power(&mut source);
    assert_eq!((reading.clock_reasons, reading.sm_clock_mhz), (None, None));
    // The header alone, cut.
    std::fs::write(tree.path(METRICS), [120u8, 0]).unwrap();
    let reading = read_power(&mut source);
    assert_eq!((reading.clock_reasons, reading.sm_clock_mhz), (None, None));
    // The whole table again: read as before.
    held(Table::new(&V1_3, 1, 3)).write(&tree);
    let reading = read_power(&mut source);
    assert_eq!(
        (reading.clock_reasons, reading.sm_clock_mhz),
        (Some(0x4), Some(900))
    );
}

#[test]
fn the_warning_names_the_revision_and_what_was_wrong() {
    use super::super::gpu_metrics::parse;
    let unknown = Table::new(&V1_3, 1, 9);
    let why = parse(&unknown.bytes).unwrap_err().describe();
    assert_eq!(why, "is revision 1.9 of 120 bytes, a layout not read here");
    let mut short = Table::new(&V1_3, 1, 3);
    short.bytes.truncate(100);
    let why = parse(&short.bytes).unwrap_err().describe();
    assert_eq!(why, "holds 100 bytes where its header says 120 (cut short)");
}

#[test]
fn a_card_without_the_table_has_no_throttle_figures() {
    let reading = read_power(&mut Tree::of("amdgpu-both-keys").open());
    assert_eq!((reading.clock_reasons, reading.sm_clock_mhz), (None, None));
}

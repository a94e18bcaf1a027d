//! Why an AMD GPU's clocks are held down, and its graphics clock, from amdgpu's binary
//! `device/gpu_metrics` table, in the vocabulary NVML's clock event reasons give NVIDIA's
//! spans.
//!
//! The table opens with a header (`structure_size` u16, `format_revision` u8,
//! `content_revision` u8, little-endian) that names its layout: `1.x` for discrete GPUs,
//! `2.x` for APUs, `3.0` for newer APUs. Each layout is a C struct of the kernel's
//! (`gpu_metrics_v<F>_<C>`); the offsets below are those structs' as the kernel's compiler
//! lays them out. A revision not listed here, a header whose size is not its layout's, or
//! a file shorter than its header says gives no figure at all: a wrong offset would read
//! another field as a reason.
//!
//! The reasons come from `indep_throttle_status`, the ASIC-independent bits the driver
//! maps every ASIC's own status to (revisions 1.3 and 2.2 to 2.4). The older
//! `throttle_status` means something else on every ASIC, and revision 3.0 gives
//! residency counters instead: those revisions give the clock and no reasons. A field the
//! ASIC does not fill reads all ones, and is no figure either.

/// NVML's clock event reason bits (`nvmlClocksEventReason*`), as
/// [`PowerReading::clock_reasons`](crate::source::PowerReading) holds them.
pub(crate) const SW_POWER_CAP: u64 = 0x4;
pub(crate) const HW_SLOWDOWN: u64 = 0x8;
pub(crate) const SW_THERMAL_SLOWDOWN: u64 = 0x20;
pub(crate) const HW_THERMAL_SLOWDOWN: u64 = 0x40;

/// The ASIC-independent throttler bits (the kernel's `SMU_THROTTLER_*_BIT`), by range,
/// and the NVML reason each range stands for: a package power limit the firmware keeps
/// (PPT0-3, SPL, FPPT, SPPT, SPPT_APU; PPM, the platform's) is a power cap; a current
/// limit (TDC, EDC, APCC) or the PROCHOT signal a hardware slowdown; a temperature the
/// firmware keeps (GPU, core, memory, edge, hotspot, SoC, liquid) a software thermal
/// slowdown; a voltage regulator's temperature or VRHOT signal a hardware one. FIT (bit
/// 57, a reliability limit) has no NVML reason and is left out.
const INDEPENDENT: [(u32, u32, u64); 7] = [
    (0, 7, SW_POWER_CAP),
    (16, 23, HW_SLOWDOWN),
    (32, 37, SW_THERMAL_SLOWDOWN),
    (38, 41, HW_THERMAL_SLOWDOWN),
    (42, 43, SW_THERMAL_SLOWDOWN),
    (44, 45, HW_THERMAL_SLOWDOWN),
    (46, 47, HW_SLOWDOWN),
];
/// `SMU_THROTTLER_PPM_BIT`: the platform's power management.
const PPM: u32 = 56;

/// Where one revision keeps what is read here, in bytes from the table's start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Layout {
    format: u8,
    content: u8,
    /// `sizeof(struct gpu_metrics_v<F>_<C>)`, as the header's `structure_size` gives it.
    size: usize,
    /// `indep_throttle_status` (u64), where the revision has it.
    independent: Option<usize>,
    /// The graphics clock (u16 MHz each): `current_gfxclk` (one, or one per XCC on
    /// revisions 1.4 to 1.6), else `average_gfxclk_frequency`.
    clock: Clock,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Clock {
    /// `current_gfxclk`, then `average_gfxclk_frequency` where it is not filled.
    Current { current: usize, average: usize },
    /// `current_gfxclk[8]`: the lowest of those filled.
    PerXcc(usize),
    /// `average_gfxclk_frequency` only.
    Average(usize),
}

const LAYOUTS: [Layout; 13] = [
    layout(
        1,
        0,
        80,
        None,
        Clock::Current {
            current: 54,
            average: 40,
        },
    ),
    layout(
        1,
        1,
        96,
        None,
        Clock::Current {
            current: 54,
            average: 40,
        },
    ),
    layout(
        1,
        2,
        104,
        None,
        Clock::Current {
            current: 54,
            average: 40,
        },
    ),
    layout(
        1,
        3,
        120,
        Some(112),
        Clock::Current {
            current: 54,
            average: 40,
        },
    ),
    layout(1, 4, 288, None, Clock::PerXcc(240)),
    layout(1, 5, 360, None, Clock::PerXcc(312)),
    layout(1, 6, 384, None, Clock::PerXcc(336)),
    layout(
        2,
        0,
        120,
        None,
        Clock::Current {
            current: 80,
            average: 68,
        },
    ),
    layout(
        2,
        1,
        120,
        None,
        Clock::Current {
            current: 76,
            average: 64,
        },
    ),
    layout(
        2,
        2,
        128,
        Some(120),
        Clock::Current {
            current: 76,
            average: 64,
        },
    ),
    layout(
        2,
        3,
        152,
        Some(120),
        Clock::Current {
            current: 76,
            average: 64,
        },
    ),
    layout(
        2,
        4,
        168,
        Some(120),
        Clock::Current {
            current: 76,
            average: 64,
        },
    ),
    layout(3, 0, 264, None, Clock::Average(174)),
];

const fn layout(
    format: u8,
    content: u8,
    size: usize,
    independent: Option<usize>,
    clock: Clock,
) -> Layout {
    Layout {
        format,
        content,
        size,
        independent,
        clock,
    }
}

/// What one read of the table gives.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Metrics {
    /// NVML's reason bits; `None` where the revision or the ASIC gives none.
    pub(crate) reasons: Option<u64>,
    /// The graphics clock, in MHz.
    pub(crate) clock_mhz: Option<u64>,
}

/// Why a table gave no figure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Unread {
    /// Shorter than its header, or than the size it says.
    Short { len: usize, size: Option<usize> },
    /// A revision whose layout is not known here, or whose size is not that layout's.
    Unknown {
        format: u8,
        content: u8,
        size: usize,
    },
}

impl Unread {
    /// The revision, in words, for the warning that names it.
    pub(crate) fn describe(&self) -> String {
        match self {
            Unread::Short { len, size: None } => {
                format!("holds {len} bytes, less than its 4-byte header")
            }
            Unread::Short {
                len,
                size: Some(size),
            } => format!("holds {len} bytes where its header says {size} (cut short)"),
            Unread::Unknown {
                format,
                content,
                size,
            } => format!("is revision {format}.{content} of {size} bytes, a layout not read here"),
        }
    }
}

/// Reads a whole `gpu_metrics` table.
pub(crate) fn parse(table: &[u8]) -> Result<Metrics, Unread> {
    let len = table.len();
    let [s0, s1, format, content, ..] = *table else {
        return Err(Unread::Short { len, size: None });
    };
    let size = usize::from(u16::from_le_bytes([s0, s1]));
    let layout = LAYOUTS
        .iter()
        .find(|l| l.format == format && l.content == content && l.size == size)
        .ok_or(Unread::Unknown {
            format,
            content,
            size,
        })?;
    if len < size {
        return Err(Unread::Short {
            len,
            size: Some(size),
        });
    }
    let u16_at = |at: usize| u16::from_le_bytes([table[at], table[at + 1]]);
    // Unfilled fields read all ones; a clock of zero is the graphics block powered off,
    // not a clock it is held down to.
    let mhz = |at: usize| Some(u64::from(u16_at(at))).filter(|&m| m != 0 && m != 0xffff);
    let clock_mhz = match layout.clock {
        Clock::Current { current, average } => mhz(current).or_else(|| mhz(average)),
        Clock::PerXcc(at) => (0..8).filter_map(|i| mhz(at + 2 * i)).min(),
        Clock::Average(at) => mhz(at),
    };
    let reasons = layout.independent.and_then(|at| {
        let mut bytes = [0; 8];
        bytes.copy_from_slice(&table[at..at + 8]);
        Some(u64::from_le_bytes(bytes))
            .filter(|&bits| bits != u64::MAX)
            .map(to_nvml)
    });
    Ok(Metrics { reasons, clock_mhz })
}

/// The independent throttler bits as NVML's reason bits.
fn to_nvml(bits: u64) -> u64 {
    let mut reasons = 0;
    for (first, last, reason) in INDEPENDENT {
        let width = last - first + 1;
        if (bits >> first) & ((1 << width) - 1) != 0 {
            reasons |= reason;
        }
    }
    if bits >> PPM & 1 != 0 {
        reasons |= SW_POWER_CAP;
    }
    reasons
}

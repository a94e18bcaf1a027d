//! Why an AMD or Intel GPU's clocks are held down, and its graphics clock, from the files
//! its driver has for them, in the vocabulary NVML's clock event reasons give NVIDIA's
//! spans.
//!
//! - xe: `device/tile<N>/gt<M>/freq0/throttle/status` and its `reason_*` files (`1` when
//!   that reason holds the clock down), and `freq0/act_freq` (MHz).
//! - i915: `cardN/gt/gt<M>/throttle_reason_status` and `throttle_reason_*`, and
//!   `rps_act_freq_mhz`.
//! - amdgpu: the binary `device/gpu_metrics` table (read as [`gpu_metrics`] says): its
//!   ASIC-independent throttler bits and its graphics clock.
//!
//! Intel's reasons are read only while `status` says the clock is held down.

use std::path::{Path, PathBuf};

use super::cards::{Card, Driver};
use super::files;
use super::gpu_metrics::{
    self, HW_SLOWDOWN, HW_THERMAL_SLOWDOWN, SW_POWER_CAP, SW_THERMAL_SLOWDOWN,
};
use crate::source::PowerReading;

/// Each of the drivers' reasons (the file name after `reason_`), and the NVML reason it
/// stands for: a power limit the firmware keeps (PL1, PL2) is a power cap; a temperature
/// the firmware keeps (thermal, RATL, the SoC's or memory's) a software thermal slowdown;
/// a voltage regulator's thermal alert a hardware one; a current limit (PL4, ICCMAX, the
/// regulator's TDC) or the platform's PROCHOT signal a hardware slowdown.
const REASONS: [(&str, u64); 12] = [
    ("pl1", SW_POWER_CAP),
    ("pl2", SW_POWER_CAP),
    ("pl4", HW_SLOWDOWN),
    ("iccmax", HW_SLOWDOWN),
    ("vr_tdc", HW_SLOWDOWN),
    ("prochot", HW_SLOWDOWN),
    ("thermal", SW_THERMAL_SLOWDOWN),
    ("ratl", SW_THERMAL_SLOWDOWN),
    ("soc_thermal", SW_THERMAL_SLOWDOWN),
    ("mem_thermal", SW_THERMAL_SLOWDOWN),
    ("vr_thermalert", HW_THERMAL_SLOWDOWN),
    ("vr_thermal", HW_THERMAL_SLOWDOWN),
];

/// One GT's throttle files.
#[derive(Debug)]
pub(crate) struct Gt {
    status: PathBuf,
    /// Each reason file there is, with its NVML bit.
    reasons: Vec<(PathBuf, u64)>,
    /// The actual graphics clock, in MHz.
    clock: Option<PathBuf>,
}

/// One card's throttle files.
#[derive(Debug)]
pub(crate) enum Throttle {
    /// An Intel GPU's GTs.
    Intel { gts: Vec<Gt> },
    /// An AMD GPU's `gpu_metrics` table.
    Amd {
        path: PathBuf,
        /// Whether the table's one warning was said.
        told: bool,
    },
}

impl Throttle {
    /// The card's throttle files, found once as the source opens; `None` when its driver
    /// has none (a kernel without them).
    pub(crate) fn open(card: &Card) -> Option<Self> {
        let gts: Vec<Gt> = match card.driver {
            Driver::Xe => subdirs(&card.dir, "tile")
                .iter()
                .flat_map(|tile| subdirs(tile, "gt"))
                .filter_map(|gt| xe_gt(&gt.join("freq0")))
                .collect(),
            Driver::I915 => subdirs(&card.drm_dir.join("gt"), "gt")
                .iter()
                .filter_map(|gt| i915_gt(gt))
                .collect(),
            Driver::Amdgpu => {
                let path = card.dir.join("gpu_metrics");
                return path.is_file().then_some(Self::Amd { path, told: false });
            }
        };
        (!gts.is_empty()).then_some(Self::Intel { gts })
    }

    /// Reads the reasons and the lowest clock into `out`; a file that cannot be read
    /// leaves its figure out.
    pub(crate) fn read(&mut self, buf: &mut Vec<u8>, out: &mut PowerReading) {
        match self {
            Self::Intel { gts } => read_gts(gts, buf, out),
            Self::Amd { path, told } => read_metrics(path, told, buf, out),
        }
    }
}

/// Reads an AMD GPU's table into `out`. A table that is not one the layouts know, or is
/// cut short, gives nothing, and says so once (a file that cannot be read at all, as a
/// device that went away, says nothing: the memory read tells of that).
fn read_metrics(path: &Path, told: &mut bool, buf: &mut Vec<u8>, out: &mut PowerReading) {
    if files::read_into(path, buf).is_err() {
        return;
    }
    match gpu_metrics::parse(buf) {
        Ok(metrics) => {
            out.clock_reasons = metrics.reasons;
            out.sm_clock_mhz = metrics.clock_mhz;
        }
        Err(unread) => {
            if !std::mem::replace(told, true) {
                eprintln!(
                    "gpuspan: warning: {} {}: this GPU's spans carry no throttle reasons \
                     and no graphics clock from it rather than a guess",
                    path.display(),
                    unread.describe()
                );
            }
        }
    }
}

/// Reads the GTs' reasons and the lowest GT clock into `out`.
fn read_gts(gts: &[Gt], buf: &mut Vec<u8>, out: &mut PowerReading) {
    let mut reasons: Option<u64> = None;
    let mut clock: Option<u64> = None;
    for gt in gts {
        if let Ok(status) = files::number(&gt.status, buf) {
            let mut bits = 0;
            if status != 0 {
                for (path, bit) in &gt.reasons {
                    if files::number(path, buf).is_ok_and(|held| held != 0) {
                        bits |= bit;
                    }
                }
            }
            reasons = Some(reasons.unwrap_or(0) | bits);
        }
        if let Some(mhz) = gt.clock.as_ref().and_then(|p| files::number(p, buf).ok()) {
            clock = Some(clock.map_or(mhz, |low| low.min(mhz)));
        }
    }
    out.clock_reasons = reasons;
    out.sm_clock_mhz = clock;
}

/// xe's GT: `freq0/throttle/{status,reason_*}` and `freq0/act_freq`.
fn xe_gt(freq: &Path) -> Option<Gt> {
    let throttle = freq.join("throttle");
    gt(throttle.join("status"), |reason| {
        throttle.join(format!("reason_{reason}"))
    })
    .map(|gt| Gt {
        clock: Some(freq.join("act_freq")).filter(|p| p.is_file()),
        ..gt
    })
}

/// i915's GT: `throttle_reason_{status,*}` and `rps_act_freq_mhz`.
fn i915_gt(dir: &Path) -> Option<Gt> {
    gt(dir.join("throttle_reason_status"), |reason| {
        dir.join(format!("throttle_reason_{reason}"))
    })
    .map(|gt| Gt {
        clock: Some(dir.join("rps_act_freq_mhz")).filter(|p| p.is_file()),
        ..gt
    })
}

fn gt(status: PathBuf, reason: impl Fn(&str) -> PathBuf) -> Option<Gt> {
    if !status.is_file() {
        return None;
    }
    let reasons = REASONS
        .iter()
        .map(|&(name, bit)| (reason(name), bit))
        .filter(|(path, _)| path.is_file())
        .collect();
    Some(Gt {
        status,
        reasons,
        clock: None,
    })
}

/// `<dir>/<prefix><N>` directories, in order of N.
fn subdirs(dir: &Path, prefix: &str) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut found: Vec<(u32, PathBuf)> = entries
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let n = entry
                .file_name()
                .to_str()?
                .strip_prefix(prefix)?
                .parse()
                .ok()?;
            Some((n, entry.path()))
        })
        .collect();
    found.sort();
    found.into_iter().map(|(_, path)| path).collect()
}

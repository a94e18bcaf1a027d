//! The peak gpuspan's process lists saw, held against the driver's own accounting of the
//! process (NVML's `maxMemoryUsage`), once, as the run ends. The driver counts every
//! allocation; the lists are read on a slower cadence than device memory, so the gap says
//! how much of this process's peak fell between two lists.

use std::time::Duration;

use crate::record::GpuId;
use crate::source::DriverPeak;
use crate::util::bytes;

/// One device's two figures of this process's peak (as `sampler.json` keeps them too).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct DriverCheck {
    /// The device (a GPU's NVML index, or a MIG instance of one).
    pub device: GpuId,
    /// The most memory gpuspan's process lists saw this process hold on the device.
    pub listed_peak: Option<u64>,
    /// What the driver's accounting says.
    pub driver: DriverPeak,
}

/// How accounting is turned on, for the line that says it is off.
const TURN_ON: &str = "`nvidia-smi --accounting-mode=1` (as root) turns it on";

/// The line printed as the run ends, and by `gpuspan report`: the gap on each device the
/// driver accounted, else how to turn accounting on where it is off and this process used
/// the device; `None` when there is nothing to say. `every` is how often the lists ran.
pub(crate) fn line(checks: &[DriverCheck], every: Option<Duration>) -> Option<String> {
    let used = |c: &&DriverCheck| c.listed_peak.is_some_and(|p| p > 0);
    let compared: Vec<String> = checks
        .iter()
        .filter_map(|c| match c.driver {
            DriverPeak::Peak(driver) => Some(compare(c.device, driver, c.listed_peak)),
            _ => None,
        })
        .collect();
    if !compared.is_empty() {
        let cadence = every.map_or(String::new(), |e| format!(" (read every {e:.0?})"));
        return Some(format!(
            "gpuspan: this process's peak, by the driver's accounting against gpuspan's \
             process lists{cadence}: {}",
            compared.join("; ")
        ));
    }
    let off: Vec<String> = checks
        .iter()
        .filter(used)
        .filter(|c| c.driver == DriverPeak::Off)
        .map(|c| format!("GPU {}", c.device))
        .collect();
    (!off.is_empty()).then(|| {
        format!(
            "gpuspan: the driver's accounting is off on {}, so this process's peak was not \
             checked against the driver's; {TURN_ON}",
            off.join(", ")
        )
    })
}

/// `GPU 0: 10.0 GiB against 9.50 GiB, 512 MiB (5.0 %) under`.
fn compare(device: GpuId, driver: u64, listed: Option<u64>) -> String {
    let human = |v: u64| bytes::human(i64::try_from(v).unwrap_or(i64::MAX));
    let Some(listed) = listed else {
        return format!(
            "GPU {device}: {} against none (the lists never saw this process)",
            human(driver)
        );
    };
    let gap = driver.abs_diff(listed);
    let share = if driver > 0 {
        100.0 * gap as f64 / driver as f64
    } else {
        0.0
    };
    let side = if listed <= driver { "under" } else { "over" };
    if gap == 0 {
        format!(
            "GPU {device}: {} against {}, the same",
            human(driver),
            human(listed)
        )
    } else {
        format!(
            "GPU {device}: {} against {}, {} ({share:.1} %) {side}",
            human(driver),
            human(listed),
            human(gap)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    fn check(device: u32, listed: Option<u64>, driver: DriverPeak) -> DriverCheck {
        DriverCheck {
            device: GpuId::gpu(device),
            listed_peak: listed,
            driver,
        }
    }

    #[test]
    fn the_gap_on_each_accounted_device_is_in_bytes_and_percent() {
        let checks = [
            check(0, Some(9 * GIB), DriverPeak::Peak(10 * GIB)),
            check(3, Some(2 * GIB), DriverPeak::Peak(2 * GIB)),
            check(5, Some(GIB), DriverPeak::Off),
        ];
        let line = line(&checks, Some(Duration::from_millis(225))).unwrap();
        assert_eq!(
            line,
            "gpuspan: this process's peak, by the driver's accounting against gpuspan's \
             process lists (read every 225ms): GPU 0: 10.0 GiB against 9.0 GiB, 1.0 GiB \
             (10.0 %) under; GPU 3: 2.0 GiB against 2.0 GiB, the same"
        );
    }

    #[test]
    fn accounting_off_on_a_device_this_process_used_says_how_to_turn_it_on() {
        let checks = [
            check(0, Some(GIB), DriverPeak::Off),
            check(1, Some(0), DriverPeak::Off),
            check(2, Some(GIB), DriverPeak::Unsupported),
        ];
        let line = line(&checks, None).unwrap();
        assert!(line.contains("accounting is off on GPU 0, so"), "{line}");
        assert!(line.contains("nvidia-smi --accounting-mode=1"), "{line}");
        assert!(!line.contains("GPU 1") && !line.contains("GPU 2"), "{line}");
    }

    #[test]
    fn nothing_to_compare_and_nothing_off_says_nothing() {
        let checks = [
            check(0, Some(GIB), DriverPeak::Unsupported),
            check(1, None, DriverPeak::NoRecord),
            check(2, None, DriverPeak::Off),
        ];
        assert_eq!(line(&checks, None), None);
        assert_eq!(line(&[], None), None);
    }
}

//! Small helpers of the command: byte counts for people (as the SDK's summary writes them),
//! wall-clock time, and a lock that survives a panicked holder.

use std::sync::{Mutex, MutexGuard};
use std::time::{SystemTime, UNIX_EPOCH};

const MIB: f64 = 1_048_576.0;
const GIB: f64 = 1_073_741_824.0;

/// Bytes in binary units, three significant digits: `512 B`, `1.5 KiB`, `150 MiB`.
pub(crate) fn human(value: i64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = value.unsigned_abs() as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit < UNITS.len() - 1 {
        v /= 1024.0;
        unit += 1;
    }
    let sign = if value < 0 { "-" } else { "" };
    if unit == 0 {
        format!("{sign}{v:.0} B")
    } else if v >= 100.0 {
        format!("{sign}{v:.0} {}", UNITS[unit])
    } else {
        format!("{sign}{v:.1} {}", UNITS[unit])
    }
}

/// As [`human`], with a `+` on growth.
pub(crate) fn signed(value: i64) -> String {
    if value > 0 {
        format!("+{}", human(value))
    } else {
        human(value)
    }
}

/// Mebibytes with `decimals` places: `1234 MiB`.
pub(crate) fn mib(bytes: f64, decimals: usize) -> String {
    format!("{:.*} MiB", decimals, bytes / MIB)
}

/// Gibibytes with `decimals` places: `1.25 GiB`.
pub(crate) fn gib(bytes: f64, decimals: usize) -> String {
    format!("{:.*} GiB", decimals, bytes / GIB)
}

/// Wall-clock time as UNIX nanoseconds (0 before 1970).
pub(crate) fn unix_nanos(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// Locks `mutex`, taking the data even when a holder panicked.
pub(crate) fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use super::{gib, human, mib};

    #[test]
    fn byte_counts_read_as_the_summary_writes_them() {
        assert_eq!(human(512), "512 B");
        assert_eq!(human(1536), "1.5 KiB");
        assert_eq!(human(150 << 20), "150 MiB");
        assert_eq!(mib(1_293_942_784.0, 0), "1234 MiB");
        assert_eq!(gib(1_342_177_280.0, 2), "1.25 GiB");
    }
}

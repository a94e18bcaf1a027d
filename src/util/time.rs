//! Wall-clock time: UNIX nanoseconds for spans and ticks, and the UTC date of run ids.

use std::time::{SystemTime, UNIX_EPOCH};

/// Wall-clock time as UNIX nanoseconds (0 before 1970).
pub(crate) fn unix_nanos(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// `(YYYYMMDD, HHMMSS)` in UTC for a Unix time, for run ids.
pub(crate) fn utc_date_time(unix_seconds: u64) -> (String, String) {
    let days = unix_seconds / 86_400;
    let seconds = unix_seconds % 86_400;
    // Civil-from-days (Howard Hinnant's algorithm), valid for any date after 1970.
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (
        format!("{year:04}{month:02}{day:02}"),
        format!(
            "{:02}{:02}{:02}",
            seconds / 3600,
            seconds / 60 % 60,
            seconds % 60
        ),
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn run_ids_use_the_utc_calendar() {
        assert_eq!(
            super::utc_date_time(0),
            ("19700101".into(), "000000".into())
        );
        // 2026-11-30 04:51:01 UTC
        assert_eq!(
            super::utc_date_time(1_796_014_261),
            ("20261130".into(), "045101".into())
        );
        // 2024-02-29 23:59:59 UTC, a leap day
        assert_eq!(
            super::utc_date_time(1_709_251_199),
            ("20240229".into(), "235959".into())
        );
    }
}

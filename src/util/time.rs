//! Wall-clock time: UNIX nanoseconds for spans and ticks, and the UTC date of run ids.

use std::time::{SystemTime, UNIX_EPOCH};

/// Wall-clock time as UNIX nanoseconds (0 before 1970).
pub fn unix_nanos(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// `(YYYYMMDD, HHMMSS)` in UTC for a Unix time, for run ids.
pub(crate) fn utc_date_time(unix_seconds: u64) -> (String, String) {
    let time = i64::try_from(unix_seconds)
        .ok()
        .and_then(|seconds| jiff::Timestamp::from_second(seconds).ok())
        .unwrap_or(jiff::Timestamp::MAX);
    (
        time.strftime("%Y%m%d").to_string(),
        time.strftime("%H%M%S").to_string(),
    )
}

/// `2026-12-02 13:02:11.123 UTC`: a moment as a person reads it.
pub(crate) fn utc_readable(unix_nanos: u64) -> String {
    jiff::Timestamp::from_nanosecond(i128::from(unix_nanos)).map_or_else(
        |_| format!("{unix_nanos} ns"),
        |t| t.strftime("%Y-%m-%d %H:%M:%S%.3f UTC").to_string(),
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

    #[test]
    fn a_moment_reads_to_the_millisecond() {
        assert_eq!(
            super::utc_readable(1_796_014_261_123_456_789),
            "2026-11-30 04:51:01.123 UTC"
        );
    }
}

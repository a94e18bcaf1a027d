//! The embedded default: a local run directory (`gpuspan-runs/<run-id>/`) holding
//! `traces.jsonl` and `metrics.jsonl` in OTLP/JSON, and the per-epoch summary drawn from it.

mod record;
mod summary;

pub use crate::config::default_run_root;
pub(crate) use record::{device_figure, unix_nanos};
pub use record::{DeviceFigures, Role, SpanRecord};
pub(crate) use summary::bytes as format_bytes;
pub(crate) use summary::SummaryTap;
pub use summary::{read_run, EpochSummary, EpochTable, Memory, RunSummary};

/// File of spans inside a run directory.
pub const TRACES_FILE: &str = "traces.jsonl";
/// File of metrics inside a run directory.
pub const METRICS_FILE: &str = "metrics.jsonl";

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

//! `sampler.json`: how well the sampler kept its cadence over a run, written at shutdown
//! so that `gpuspan report` can say how far the peaks can be trusted.

use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::sampler::{driver_check_line, DriverCheck, SamplerStats};

/// File of the sampler's figures inside a run directory.
pub const SAMPLER_FILE: &str = "sampler.json";

/// The sampler's figures as the file keeps them (durations in nanoseconds).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct SamplerFile {
    interval_ns: u64,
    achieved_interval_ns: Option<u64>,
    max_gap_ns: u64,
    ticks: u64,
    missed_ticks: u64,
    widened_interval_ns: Option<u64>,
    memory_read_ns: u64,
    process_interval_ns: Option<u64>,
    process_read_ns: Option<u64>,
    process_lists: u64,
    /// Absent from files written before the check existed.
    #[serde(default)]
    driver_check: Vec<DriverCheck>,
}

fn ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Writes `stats` into the run directory `dir`.
pub(crate) fn write(dir: &Path, stats: &SamplerStats) -> std::io::Result<()> {
    let file = SamplerFile {
        interval_ns: ns(stats.interval),
        achieved_interval_ns: stats.achieved_interval.map(ns),
        max_gap_ns: ns(stats.max_gap),
        ticks: stats.samples,
        missed_ticks: stats.missed_ticks,
        widened_interval_ns: stats.widened_interval.map(ns),
        memory_read_ns: ns(stats.memory_read),
        process_interval_ns: stats.process_interval.map(ns),
        process_read_ns: stats.process_read.map(ns),
        process_lists: stats.process_lists,
        driver_check: stats.driver_check.clone(),
    };
    let text = serde_json::to_string_pretty(&file).map_err(std::io::Error::other)?;
    std::fs::write(dir.join(SAMPLER_FILE), text + "\n")
}

/// One line on how far the run's peaks can be trusted, when the run directory has the
/// sampler's figures, and one on this process's peak against the driver's accounting when
/// there is something to say.
pub fn trust_line(dir: &Path) -> Option<String> {
    let text = std::fs::read_to_string(dir.join(SAMPLER_FILE)).ok()?;
    let file: SamplerFile = serde_json::from_str(&text).ok()?;
    let every = file.process_interval_ns.map(Duration::from_nanos);
    let mut line = describe(&file);
    if let Some(check) = driver_check_line(&file.driver_check, every) {
        line.push('\n');
        line.push_str(check.trim_start_matches("gpuspan: "));
    }
    Some(line)
}

fn describe(f: &SamplerFile) -> String {
    let d = |ns: u64| format!("{:.1?}", Duration::from_nanos(ns));
    let scheduled = (f.ticks + f.missed_ticks).max(1);
    let kept = 100.0 * f.ticks as f64 / scheduled as f64;
    let mut line = format!(
        "sampler: device memory read every {} on average (asked {}), {kept:.1} % of ticks \
         kept, longest gap {}: a spike lasting longer than that is in every peak",
        d(f.achieved_interval_ns.unwrap_or(f.interval_ns)),
        d(f.interval_ns),
        d(f.max_gap_ns)
    );
    if let Some(widened) = f.widened_interval_ns {
        line.push_str(&format!(
            "; memory reads were too slow for the interval asked, widened to {}",
            d(widened)
        ));
    }
    if let Some(every) = f.process_interval_ns {
        line.push_str(&format!("; process memory read every {}", d(every)));
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::DriverPeak;

    #[test]
    fn the_file_round_trips_into_a_line_on_the_peaks_trust() {
        let dir = tempfile::tempdir().unwrap();
        let stats = SamplerStats {
            samples: 998,
            interval: Duration::from_millis(5),
            max_gap: Duration::from_micros(9100),
            missed_ticks: 2,
            achieved_interval: Some(Duration::from_micros(5010)),
            widened_interval: None,
            memory_read: Duration::from_micros(96),
            process_interval: Some(Duration::from_millis(720)),
            process_read: Some(Duration::from_millis(36)),
            process_lists: 11,
            driver_check: vec![DriverCheck {
                device: crate::record::GpuId::gpu(0),
                listed_peak: Some(9 << 30),
                driver: DriverPeak::Peak(10 << 30),
            }],
        };
        write(dir.path(), &stats).unwrap();
        let line = trust_line(dir.path()).unwrap();
        assert!(line.contains("99.8 % of ticks kept"), "{line}");
        assert!(line.contains("longest gap 9.1ms"), "{line}");
        assert!(line.contains("process memory read every 720.0ms"), "{line}");
        assert!(
            line.ends_with(
                "\nthis process's peak, by the driver's accounting against gpuspan's process \
                 lists (read every 720ms): GPU 0: 10.0 GiB against 9.0 GiB, 1.0 GiB (10.0 %) \
                 under"
            ),
            "{line}"
        );
        assert_eq!(trust_line(&dir.path().join("missing")), None);
    }
}

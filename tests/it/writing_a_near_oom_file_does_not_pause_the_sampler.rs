//! The near-OOM file holds the whole recorded window, and writing it must not pause the
//! sampler: a crossing is exactly when the next short spike may be the one that runs out of
//! memory. With 8 devices crossing together after a full 30 s window at 5 ms (6000 ticks of
//! 8 devices), the ticks around each crossing stay within two sampling intervals.
//!
//! The sampler's gaps are read tick by tick from the scripted source (the sampler reads it
//! once per tick): the sampler's own `max_gap` is the longest gap since the run started,
//! which a busy moment while the window fills would already have raised. A stretch just
//! before each crossing says what the machine itself allows the sampler.

use gpuspan_test_support as support;

use std::path::Path;
use std::time::{Duration, Instant};

use gpuspan::Telemetry;

use gpuspan::settings::Exporter;
use support::sampling;
use support::scripted::scripted;

const INTERVAL: Duration = Duration::from_millis(5);
const WINDOW: Duration = Duration::from_secs(30);
const DEVICES: u32 = 8;
const CROSSINGS: usize = 3;
/// How long the gaps are looked at, from a crossing on.
const STRETCH: Duration = Duration::from_millis(300);
const GIB: u64 = 1 << 30;
/// The scripted devices hold 80 GiB.
const LOW: u64 = 20 * GIB;
const HIGH: u64 = 79 * GIB;

fn near_oom_files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .map(|entries| entries.filter_map(Result::ok).map(|e| e.path()).collect())
        .unwrap_or_default();
    files.retain(|p| {
        let name = p.file_name().unwrap().to_string_lossy();
        name.starts_with("near-oom-") && name.ends_with(".json")
    });
    files.sort();
    files
}

fn wait_for_files(dir: &Path, count: usize) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while near_oom_files(dir).len() < count {
        assert!(
            Instant::now() < deadline,
            "{} near-oom files of {count}",
            near_oom_files(dir).len()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn eight_devices_crossing_after_a_full_window_keep_the_sampler_on_schedule() {
    let (source, script) = scripted(DEVICES, LOW);
    let runs = tempfile::tempdir().unwrap();
    let run_dir = runs.path().join("ring");
    let builder = Telemetry::builder()
        .memory_source(source)
        .traces_exporter(Exporter::None)
        .metrics_exporter(Exporter::None)
        .summary(false)
        .run_dir(runs.path())
        .run_id("ring")
        .sample_interval(INTERVAL)
        .near_oom_window(WINDOW);
    script.keep_read_times();
    let (telemetry, gaps) = sampling::run(builder, |_| {
        let _epoch = gpuspan::epoch_span!(0);
        // A whole window of ticks in the ring.
        std::thread::sleep(WINDOW);
        let mut gaps = Vec::new();
        for crossing in 0..CROSSINGS {
            // The machine's own pace just before, over as long a stretch.
            let quiet = script.reads_kept();
            std::thread::sleep(STRETCH);
            let quiet = script.longest_gap_since(quiet);
            let _step = gpuspan::step_span!(crossing);
            let from = script.reads_kept();
            script.set_all(HIGH);
            std::thread::sleep(STRETCH);
            wait_for_files(&run_dir, (crossing + 1) * DEVICES as usize);
            // Two more ticks: a gap still open when the files appeared is closed.
            script.wait_reads(2);
            let crossed = script.longest_gap_since(from);
            script.set_all(LOW);
            gaps.push((quiet, crossed));
        }
        gaps
    });
    let stats = telemetry.sampler_stats().expect("a source");
    telemetry.shutdown().expect("clean shutdown");

    // Within two intervals of the longest gap the machine gave the sampler anyway, over as
    // long a stretch just before (on an idle machine, about one interval). One crossing may
    // be unlucky; writing the files must not hold the sampler back at each.
    let late: Vec<_> = gaps
        .iter()
        .filter(|(quiet, crossed)| *crossed >= *quiet + 2 * INTERVAL)
        .collect();
    assert!(
        late.len() <= 1,
        "the sampler fell behind at {} of {CROSSINGS} crossings: (longest gap before, \
         longest gap from the crossing on) {gaps:?}, interval {INTERVAL:?}, max_gap over the \
         run {:?}",
        late.len(),
        stats.max_gap
    );

    // Each file holds the whole window, every device.
    let files = near_oom_files(&run_dir);
    assert_eq!(files.len(), CROSSINGS * DEVICES as usize, "{files:?}");
    let file: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&files[0]).unwrap()).unwrap();
    let times = file["timeline"]["unix_nano"].as_array().unwrap();
    let covered = times.last().unwrap().as_u64().unwrap() - times[0].as_u64().unwrap();
    assert!(
        covered >= (WINDOW - Duration::from_secs(1)).as_nanos() as u64,
        "the file covers {covered} ns of the {WINDOW:?} window"
    );
    let devices = file["timeline"]["devices"].as_array().unwrap();
    assert_eq!(devices.len(), DEVICES as usize);
    for device in devices {
        assert_eq!(device["used"].as_array().unwrap().len(), times.len());
        assert_eq!(device["used"].as_array().unwrap().last().unwrap(), HIGH);
    }
}

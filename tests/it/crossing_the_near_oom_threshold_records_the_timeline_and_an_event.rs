//! The near-OOM flight recorder, read through the fake NVML: when the device crosses 95 %
//! of its total inside a step, the step gets a `gpu.memory.near_oom` event (device, used,
//! limit, the span the rise began in) and the run directory gets `near-oom-<time>.json`
//! with the recorded timeline and every span open at the time, with its start.

use gpuspan_test_support as support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use support::fake_nvml::{FakeNvml, MIB};
use support::receiver::Receiver;
use support::sampling::wait_for_ticks;
use support::setup;

const TOTAL: u64 = 80 * 1024 * MIB;
const LOW: u64 = 20 * 1024 * MIB;
/// 96 % of the total.
const HIGH: u64 = TOTAL / 100 * 96;

fn near_oom_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|entries| entries.filter_map(Result::ok).map(|e| e.path()).collect())
        .unwrap_or_default();
    files.retain(|p| {
        let name = p.file_name().unwrap().to_string_lossy();
        name.starts_with("near-oom-") && name.ends_with(".json")
    });
    files
}

#[test]
fn a_rise_past_ninety_five_percent_is_recorded_once() {
    let fake = FakeNvml::build();
    fake.set_memory(0, LOW, TOTAL);
    let receiver = Receiver::start_grpc();
    let runs = tempfile::tempdir().unwrap();
    let builder = setup::to_receiver(&receiver)
        .nvml_lib(fake.path())
        .run_dir(runs.path())
        .run_id("oom-run")
        .sample_interval(Duration::from_millis(2));
    let run_dir = runs.path().join("oom-run");
    let (telemetry, ()) = setup::run(builder, |_| {
        wait_for_ticks(&fake, 1, 2);
        let _e = gpuspan::epoch_span!(4);
        {
            let _s = gpuspan::step_span!(0);
            wait_for_ticks(&fake, 1, 2);
        }
        {
            let _s = gpuspan::step_span!(1);
            fake.set_memory(0, HIGH, TOTAL);
            wait_for_ticks(&fake, 1, 3);
            // Written by the recorder's own thread, while the step is still open.
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            while near_oom_files(&run_dir).is_empty() {
                assert!(std::time::Instant::now() < deadline, "no near-oom file");
                std::thread::sleep(Duration::from_millis(5));
            }
            fake.set_memory(0, LOW, TOTAL);
            wait_for_ticks(&fake, 1, 2);
        }
    });
    telemetry.shutdown().unwrap();

    // Once: the device stayed over the threshold for several readings.
    let files = near_oom_files(&run_dir);
    assert_eq!(files.len(), 1, "{files:?}");
    let file: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&files[0]).unwrap()).unwrap();
    assert_eq!(file["event"], "gpu.memory.near_oom");
    assert_eq!(file["device"]["index"], 0);
    assert_eq!(file["device"]["used"], HIGH);
    assert_eq!(file["device"]["limit"], TOTAL);
    assert_eq!(file["rise"]["from"], LOW);
    assert_eq!(file["rise"]["span"], "step 1");
    let open: Vec<(String, i64)> = file["open_spans"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["name"].as_str().unwrap().to_owned(),
                s["index"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(open, [("epoch".to_owned(), 4), ("step".to_owned(), 1)]);
    // The timeline: the low readings, then the crossing one last.
    let used = file["timeline"]["devices"][0]["used"].as_array().unwrap();
    let times = file["timeline"]["unix_nano"].as_array().unwrap();
    assert_eq!(used.len(), times.len());
    assert!(used.len() >= 4, "{used:?}");
    assert_eq!(used.last().unwrap(), HIGH);
    assert!(used[..used.len() - 1].iter().any(|v| *v == LOW));

    let step = receiver
        .spans_named("step")
        .into_iter()
        .find(|s| s.int_attr("ml.step") == Some(1))
        .unwrap();
    let events = step.events_named("gpu.memory.near_oom");
    assert_eq!(events.len(), 1);
    let event = events[0];
    assert_eq!(event.int_attr("gpu.index"), Some(0));
    assert_eq!(event.int_attr("gpu.memory.used"), Some(HIGH as i64));
    assert_eq!(event.int_attr("gpu.memory.limit"), Some(TOTAL as i64));
    assert_eq!(event.str_attr("gpu.memory.rise.span"), Some("step 1"));
    assert_eq!(
        event.str_attr("gpu.memory.timeline"),
        files[0].file_name().unwrap().to_str()
    );
    assert_eq!(file["time_unix_nano"].as_u64(), Some(event.time_unix_nano));
    // Only the innermost open span carries it.
    let epoch = &receiver.spans_named("epoch")[0];
    assert!(epoch.events_named("gpu.memory.near_oom").is_empty());
    let points = receiver.points_named("gpu.memory.near_oom");
    assert_eq!(points.last().and_then(|p| p.as_int()), Some(1));
}

//! `gpuspan::record_oom` and a panic with an out-of-memory message: the innermost open
//! span gets a `gpu.memory.oom` event, and `near-oom-<time>.json` is on disk before the
//! call (or the panic hook) returns, so a program that dies next still leaves it.

use gpuspan_test_support as support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use support::receiver::Receiver;
use support::scripted::scripted;
use support::setup;

const GIB: u64 = 1 << 30;

fn near_oom_files(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .map(|e| e.path())
                .filter(|p| p.to_string_lossy().contains("near-oom-"))
                .collect()
        })
        .unwrap_or_default()
}

fn read(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[test]
fn record_oom_writes_the_file_before_it_returns_and_marks_the_step() {
    let receiver = Receiver::start_grpc();
    let runs = tempfile::tempdir().unwrap();
    let (source, script) = scripted(1, 70 * GIB);
    let builder = setup::to_receiver(&receiver)
        .memory_source(source)
        .run_dir(runs.path())
        .run_id("r")
        .sample_interval(Duration::from_millis(2));
    let dir = runs.path().join("r");
    let (telemetry, files) = setup::run(builder, |_| {
        script.wait_reads(2);
        let _e = gpuspan::epoch_span!(0);
        let _s = gpuspan::step_span!(3);
        script.wait_reads(2);
        gpuspan::record_oom("CUDA out of memory. Tried to allocate 20.00 GiB");
        near_oom_files(&dir)
    });
    telemetry.shutdown().unwrap();

    assert_eq!(
        files.len(),
        1,
        "the file was not there when record_oom returned"
    );
    let file = read(&files[0]);
    assert_eq!(file["event"], "gpu.memory.oom");
    assert_eq!(
        file["message"],
        "CUDA out of memory. Tried to allocate 20.00 GiB"
    );
    assert_eq!(file["device"]["used"], 70 * GIB);
    assert_eq!(file["device"]["limit"], 80 * GIB);

    let step = &receiver.spans_named("step")[0];
    let events = step.events_named("gpu.memory.oom");
    assert_eq!(events.len(), 1);
    assert_eq!(
        events[0].int_attr("gpu.memory.used"),
        Some((70 * GIB) as i64)
    );
    assert_eq!(
        events[0].int_attr("gpu.memory.limit"),
        Some((80 * GIB) as i64)
    );
    assert_eq!(
        events[0].str_attr("exception.message"),
        Some("CUDA out of memory. Tried to allocate 20.00 GiB")
    );
    let epoch = &receiver.spans_named("epoch")[0];
    assert!(epoch.events_named("gpu.memory.oom").is_empty());
}

#[test]
fn a_panic_with_an_out_of_memory_message_is_recorded_on_the_span_it_unwinds() {
    let receiver = Receiver::start_http();
    let runs = tempfile::tempdir().unwrap();
    let (source, script) = scripted(1, 60 * GIB);
    let builder = setup::to_receiver(&receiver)
        .memory_source(source)
        .run_dir(runs.path())
        .run_id("p")
        .sample_interval(Duration::from_millis(2));
    let dir = runs.path().join("p");
    let (telemetry, (panicked, files)) = setup::run(builder, |_| {
        script.wait_reads(2);
        let result = std::panic::catch_unwind(|| {
            let _s = gpuspan::step_span!(9);
            panic!("DriverError(CUDA_ERROR_OUT_OF_MEMORY, \"out of memory\")");
        });
        (result.is_err(), near_oom_files(&dir))
    });
    telemetry.shutdown().unwrap();

    assert!(panicked);
    assert_eq!(files.len(), 1);
    assert_eq!(read(&files[0])["event"], "gpu.memory.oom");
    let step = &receiver.spans_named("step")[0];
    assert_eq!(step.events_named("gpu.memory.oom").len(), 1);
    assert_eq!(step.status_message, "panicked while the span was open");
}

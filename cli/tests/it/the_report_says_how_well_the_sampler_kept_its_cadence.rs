//! A run directory keeps the sampler's figures (`sampler.json`), and `gpuspan report` says
//! from them how far the run's peaks can be trusted: the interval achieved, the ticks kept,
//! the longest gap, and how often process memory was read.

use gpuspan_test_support as support;

use std::process::Command;

use support::example::run_train;

#[test]
fn the_run_keeps_the_samplers_figures_and_the_report_says_what_they_mean() {
    let root = tempfile::tempdir().unwrap();
    let out = run_train(
        &["--epochs", "1", "--steps", "3", "--batch-size", "8"],
        &[
            ("GPUSPAN_RUN_DIR", root.path().to_str().unwrap()),
            ("GPUSPAN_RUN_ID", "r1"),
            ("GPUSPAN_NVML_LIB", "/nonexistent/libnvidia-ml.so.1"),
            ("GPUSPAN_SAMPLE_INTERVAL", "5ms"),
        ],
    );
    assert!(out.status.success());
    let file = root.path().join("r1").join("sampler.json");
    let figures: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&file).expect("sampler.json")).unwrap();
    assert_eq!(figures["interval_ns"], 5_000_000);
    assert!(figures["ticks"].as_u64().expect("ticks") >= 1, "{figures}");
    assert!(
        figures["process_interval_ns"].is_null(),
        "no NVML: {figures}"
    );

    let report = Command::new(env!("CARGO_BIN_EXE_gpuspan"))
        .args(["report", root.path().join("r1").to_str().unwrap()])
        .output()
        .unwrap();
    assert!(report.status.success());
    let notes = String::from_utf8_lossy(&report.stderr);
    let line = notes
        .lines()
        .find(|l| l.starts_with("sampler: "))
        .unwrap_or_else(|| panic!("no sampler line: {notes}"));
    assert!(line.contains("(asked 5.0ms)"), "{line}");
    assert!(line.contains("% of ticks kept, longest gap"), "{line}");
}

//! `gpuspan report` reads a run directory back and draws the same table the run printed,
//! its energy and throttling included, and says clearly what is wrong with a directory
//! that is not a run.

use gpuspan_test_support as support;

use std::process::Command;

use support::example::run_train;

fn gpuspan(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_gpuspan"))
        .args(args)
        .output()
        .unwrap()
}

/// The table with its duration cells blanked: the run times an epoch with its own clock, the
/// report with the span's timestamps, and the two may round to different hundredths.
fn without_durations<'a>(lines: impl Iterator<Item = &'a str>) -> Vec<String> {
    lines
        .map(|line| {
            line.split("  ")
                .map(|cell| {
                    if cell.trim().ends_with(" s") {
                        "<duration>"
                    } else {
                        cell
                    }
                })
                .collect::<Vec<_>>()
                .join("  ")
        })
        .collect()
}

#[test]
fn report_matches_the_summary_printed_at_shutdown() {
    let root = tempfile::tempdir().unwrap();
    let out = run_train(
        &["--epochs", "2", "--steps", "3", "--batch-size", "8"],
        &[
            ("GPUSPAN_RUN_DIR", root.path().to_str().unwrap()),
            ("GPUSPAN_RUN_ID", "r1"),
            ("GPUSPAN_NVML_LIB", "/nonexistent/libnvidia-ml.so.1"),
        ],
    );
    assert!(out.status.success());
    let printed = String::from_utf8_lossy(&out.stderr);
    let table_at_shutdown: Vec<String> = without_durations(
        printed
            .lines()
            .skip_while(|l| !l.starts_with("epoch  steps")),
    );
    assert_eq!(
        table_at_shutdown.len(),
        4,
        "header, two epochs, source line: {printed}"
    );

    // A run directory, and the directory of runs (its newest run), give the same table.
    for dir in [root.path().join("r1"), root.path().to_path_buf()] {
        let report = gpuspan(&["report", dir.to_str().unwrap()]);
        assert!(report.status.success());
        let text = String::from_utf8_lossy(&report.stdout);
        let table = without_durations(text.lines().skip(1));
        assert_eq!(table, table_at_shutdown);
    }
}

#[test]
fn the_energy_and_throttled_marks_match_the_summary_printed_at_shutdown() {
    let fake = support::fake_nvml::FakeNvml::build();
    let root = tempfile::tempdir().unwrap();
    // The clocks held down by the power cap (0x4) and a hardware slowdown (0x8) throughout.
    let live = root.path().join("live");
    std::fs::write(&live, "reasons 0 12\nsm_clock 0 1305\n").unwrap();
    let out = run_train(
        &["--epochs", "2", "--steps", "20", "--hidden", "400"],
        &[
            ("GPUSPAN_RUN_DIR", root.path().to_str().unwrap()),
            ("GPUSPAN_RUN_ID", "hot"),
            ("GPUSPAN_NVML_LIB", fake.path().to_str().unwrap()),
            ("FAKE_NVML_POWER_W", "250"),
            ("FAKE_NVML_LIVE_FILE", live.to_str().unwrap()),
        ],
    );
    let printed = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{printed}");
    let table = |text: &str| -> Vec<String> {
        without_durations(
            text.lines()
                .skip_while(|l| !l.starts_with("epoch  steps"))
                .take(3),
        )
    };
    let at_shutdown = table(&printed);
    assert!(
        at_shutdown[0].ends_with("  energy  power  energy/step"),
        "{printed}"
    );
    for row in &at_shutdown[1..] {
        assert!(row.contains(" W  "), "a power in every row: {printed}");
        assert!(
            row.contains("<- throttled")
                && row.ends_with("(hw_slowdown, sw_power_cap; SM clock down to 1305 MHz)"),
            "{printed}"
        );
    }
    let energy_line = |text: &str| {
        text.lines()
            .find(|l| l.starts_with("energy: "))
            .map(str::to_owned)
    };
    let line = energy_line(&printed).expect("the run's energy line");
    assert!(line.contains(" over 2 epochs, "), "{line}");

    let report = gpuspan(&["report", root.path().join("hot").to_str().unwrap()]);
    assert!(report.status.success());
    let text = String::from_utf8_lossy(&report.stdout);
    assert_eq!(table(&text), at_shutdown);
    assert_eq!(energy_line(&text), Some(line));
}

#[test]
fn a_truncated_last_line_is_reported_and_the_rest_still_counts() {
    let root = tempfile::tempdir().unwrap();
    let out = run_train(
        &["--epochs", "2", "--steps", "2", "--batch-size", "8"],
        &[
            ("GPUSPAN_RUN_DIR", root.path().to_str().unwrap()),
            ("GPUSPAN_RUN_ID", "r2"),
            ("GPUSPAN_NVML_LIB", "/nonexistent/libnvidia-ml.so.1"),
        ],
    );
    assert!(out.status.success());
    let traces = root.path().join("r2/traces.jsonl");
    let mut text = std::fs::read_to_string(&traces).unwrap();
    text.push_str("{\"resourceSpans\":[{\"resour");
    std::fs::write(&traces, text).unwrap();

    let report = gpuspan(&["report", root.path().join("r2").to_str().unwrap()]);
    assert!(report.status.success());
    let stdout = String::from_utf8_lossy(&report.stdout);
    assert_eq!(
        stdout
            .lines()
            .filter(|l| l.trim_start().starts_with(['0', '1']))
            .count(),
        2
    );
    assert!(
        stdout.contains("warning: skipped unreadable line"),
        "{stdout}"
    );
}

#[test]
fn a_directory_without_runs_is_a_clear_error() {
    let empty = tempfile::tempdir().unwrap();
    let report = gpuspan(&["report", empty.path().to_str().unwrap()]);
    assert!(!report.status.success());
    let stderr = String::from_utf8_lossy(&report.stderr);
    assert!(stderr.contains("holds no run"), "{stderr}");
    assert!(stderr.contains("traces.jsonl"), "{stderr}");
}

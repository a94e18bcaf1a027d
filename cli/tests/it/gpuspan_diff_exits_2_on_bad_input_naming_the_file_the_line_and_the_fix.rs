//! `gpuspan diff` exits 2 on input it cannot compare, with one line that names the file
//! (and the line) and says what to give instead; a last line cut short by a run killed
//! mid-write is passed over and said, not an error.

use std::path::Path;
use std::process::Command;

use gpuspan_test_support::commands::outcome;
use gpuspan_test_support::traces::{flat, write_lines, Mem, Trace, GIB};

fn diff(base: &Path, new: &Path) -> (i32, String, String) {
    outcome(
        Command::new(env!("CARGO_BIN_EXE_gpuspan"))
            .arg("diff")
            .arg(base)
            .arg(new)
            .args(["--max-increase", "5%"]),
    )
}

fn good_run(dir: &Path) -> Trace {
    let mut trace = Trace::new();
    let steps: Vec<(i64, Mem)> = (0..3).map(|s| (s, flat(2 * GIB))).collect();
    trace.epoch(0, &steps, |_, _| None);
    trace.write_run(dir);
    trace
}

#[test]
fn a_missing_path_a_directory_without_a_run_and_a_run_without_figures_exit_2() {
    let root = tempfile::tempdir().unwrap();
    let base = root.path().join("base");
    good_run(&base);

    let missing = root.path().join("nowhere");
    let (code, stdout, stderr) = diff(&base, &missing);
    assert_eq!((code, stdout.as_str()), (2, ""));
    assert_eq!(
        stderr,
        format!(
            "gpuspan diff: cannot read {}: No such file or directory (os error 2); give a run \
             directory (gpuspan-runs/<run-id>), a job's directory (a rank-<r> run per rank) or \
             an OTLP/JSON traces file\n",
            missing.display()
        )
    );

    let empty = root.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let (code, _, stderr) = diff(&empty, &base);
    assert_eq!(code, 2);
    assert_eq!(
        stderr,
        format!(
            "gpuspan diff: {} holds no run: expected traces.jsonl in it, or \
             rank-<r>/traces.jsonl below it (for a directory of runs, give the run: \
             gpuspan-runs/<run-id>)\n",
            empty.display()
        )
    );

    // A run recorded without a GPU source: spans with no gpu.memory figures.
    let cpu = root.path().join("cpu");
    let mut trace = Trace::new();
    let id = trace.reserve_id();
    trace.span("step", &id, None, None, &[("ml.step", 0)]);
    trace.write_run(&cpu);
    let (code, _, stderr) = diff(&base, &cpu);
    assert_eq!(code, 2);
    assert_eq!(
        stderr,
        format!(
            "gpuspan diff: {} holds no span with GPU memory figures (gpu.memory.peak): record \
             the run with a GPU source (NVML or nvidia-smi), or its spans through gpuspan \
             collect or gpuspan run\n",
            cpu.display()
        )
    );
}

#[test]
fn a_line_that_is_not_an_export_request_is_named_by_file_and_number() {
    let root = tempfile::tempdir().unwrap();
    let base = root.path().join("base");
    let trace = good_run(&base);
    let file = root.path().join("broken.jsonl");
    let mut lines = trace.lines();
    lines.insert(2, "{\"resourceSpans\": [oops]}".to_owned());
    write_lines(&file, &lines);
    let (code, stdout, stderr) = diff(&base, &file);
    assert_eq!((code, stdout.as_str()), (2, ""));
    assert_eq!(
        stderr,
        format!(
            "gpuspan diff: {}, line 3: expected value at line 1 column 20; each line must be one \
             OTLP/JSON ExportTraceServiceRequest, as gpuspan's traces.jsonl and the \
             OpenTelemetry Collector's file exporter write them (remove or repair the line)\n",
            file.display()
        )
    );
}

#[test]
fn a_last_line_cut_short_is_passed_over_and_said() {
    let root = tempfile::tempdir().unwrap();
    let base = root.path().join("base");
    let trace = good_run(&base);
    let file = root.path().join("killed.jsonl");
    let mut text = trace.lines().join("\n");
    text.push_str("\n{\"resourceSpans\": [{\"scopeSp");
    std::fs::write(&file, text).unwrap();
    let (code, stdout, stderr) = diff(&base, &file);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(
        stdout.contains(&format!(
            "passed over: {} line 5: cut short (EOF while parsing a string at line 1 column 28)\n",
            file.display()
        )),
        "{stdout}"
    );
}

#[test]
fn runs_with_nothing_in_common_say_what_each_holds() {
    let root = tempfile::tempdir().unwrap();
    let base = root.path().join("base");
    good_run(&base);
    let other = root.path().join("other");
    let mut trace = Trace::new();
    let id = trace.reserve_id();
    trace.span("validation", &id, None, Some(flat(GIB)), &[]);
    trace.write_run(&other);
    let (code, _, stderr) = diff(&base, &other);
    assert_eq!(code, 2);
    assert_eq!(
        stderr,
        format!(
            "gpuspan diff: nothing to compare: {} holds epoch (1), step (3) and {} holds \
             validation (1), with no span in common by rank, name, epoch and ml.step\n",
            base.display(),
            other.display()
        )
    );
}

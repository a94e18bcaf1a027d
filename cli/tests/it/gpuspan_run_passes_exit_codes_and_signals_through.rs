//! `gpuspan run` returns the command's exit code, passes SIGINT and SIGTERM on to it, and
//! records a `run` span even for a program that sends no telemetry of its own.

use gpuspan_test_support as support;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::fake_nvml::FakeNvml;
use support::otlp_json::int;
use support::traces::read_spans;

fn gpuspan_run(dir: &std::path::Path, fake: &FakeNvml, script: &str) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_gpuspan"));
    command
        .args(["run", "--", "sh", "-c", script])
        .current_dir(dir)
        .env("GPUSPAN_NVML_LIB", fake.path())
        .env("GPUSPAN_RUN_DIR", dir.join("runs"))
        .env("FAKE_NVML_USED_MIB", "3000")
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .env_remove("OTEL_TRACES_EXPORTER");
    command
}

/// Every span in the run directory's traces.jsonl, as JSON.
fn spans_in(dir: &std::path::Path) -> Vec<serde_json::Value> {
    let mut spans = Vec::new();
    for run in std::fs::read_dir(dir.join("runs")).unwrap() {
        spans.extend(read_spans(&run.unwrap().path().join("traces.jsonl")));
    }
    spans
}

#[test]
fn the_exit_code_is_returned_and_an_uninstrumented_command_gets_a_run_span() {
    let fake = FakeNvml::build();
    let dir = tempfile::tempdir().unwrap();
    let out = gpuspan_run(dir.path(), &fake, "sleep 0.1; exit 7")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(7), "{stderr}");
    assert!(stderr.contains("exited with code 7"), "{stderr}");
    let spans = spans_in(dir.path());
    assert_eq!(spans.len(), 1, "{spans:#?}");
    let run = &spans[0];
    assert_eq!(run["name"], "run");
    assert_eq!(int(run, "process.exit.code"), Some(7));
    assert_eq!(
        run["status"]["code"], 2,
        "an exit code other than 0 is an error"
    );
    assert_eq!(int(run, "gpu.memory.peak"), Some(3000 << 20));
}

fn passes_on(signal: libc::c_int, name: &str, code: i32) {
    let fake = FakeNvml::build();
    let dir = tempfile::tempdir().unwrap();
    let script = format!("trap 'exit {code}' {name}; echo ready; while true; do sleep 0.02; done");
    let mut command = gpuspan_run(dir.path(), &fake, &script);
    // As from a terminal: a signal ignored where the test runs could not be trapped.
    support::terminal::with_default_signals(&mut command);
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line.trim(), "ready");
    let sent = Instant::now();
    // SAFETY: signalling our own child process.
    assert_eq!(unsafe { libc::kill(child.id() as libc::pid_t, signal) }, 0);
    let status = child.wait().unwrap();
    assert_eq!(
        status.code(),
        Some(code),
        "the command's own handler decides"
    );
    assert!(sent.elapsed() < Duration::from_secs(10));
    let spans = spans_in(dir.path());
    assert_eq!(int(&spans[0], "process.exit.code"), Some(i64::from(code)));
}

#[test]
fn sigterm_is_passed_on_and_the_commands_exit_code_returned() {
    passes_on(libc::SIGTERM, "TERM", 42);
}

#[test]
fn sigint_is_passed_on_and_the_commands_exit_code_returned() {
    passes_on(libc::SIGINT, "INT", 43);
}

#[test]
fn a_command_that_cannot_start_is_named_and_exits_127() {
    let out = Command::new(env!("CARGO_BIN_EXE_gpuspan"))
        .args(["run", "--", "/nonexistent/train-program"])
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .env("OTEL_TRACES_EXPORTER", "none")
        .env("OTEL_METRICS_EXPORTER", "none")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(127), "{stderr}");
    assert!(
        stderr.contains("cannot start /nonexistent/train-program"),
        "{stderr}"
    );
}

//! SIGINT or SIGTERM in the middle of a run: the spans completed before the signal are in
//! the run directory, and the signal still ends the process.

use gpuspan_test_support as support;

use std::io::{BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};

use support::example::train_binary;

fn interrupt_after_two_epochs(signal: i32) {
    let root = tempfile::tempdir().unwrap();
    let mut command = Command::new(train_binary());
    command
        .args(["--epochs", "100000", "--steps", "5", "--batch-size", "8"])
        .env("GPUSPAN_RUN_DIR", root.path())
        .env("GPUSPAN_RUN_ID", "interrupted")
        .env("GPUSPAN_NVML_LIB", "/nonexistent/libnvidia-ml.so.1")
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // A shell that starts this test in the background without job control makes SIGINT
    // ignored, and an ignored signal stays ignored across exec: give the run the default.
    // SAFETY: `signal` is async-signal-safe and touches no memory of the parent.
    unsafe {
        command.pre_exec(move || {
            libc::signal(signal, libc::SIG_DFL);
            Ok(())
        });
    }
    let mut child = command.spawn().unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut lines = BufReader::new(stdout).lines();
    // Spans are exported in batches every second; two epochs take far less, so without a
    // flush on the signal they would still be queued.
    for line in lines.by_ref() {
        // The progress line of epoch 2 comes after epoch 1's span closed.
        if line.unwrap().starts_with("epoch 2:") {
            break;
        }
    }
    // SAFETY: kill has no memory-safety preconditions.
    let rc = unsafe { libc::kill(child.id() as i32, signal) };
    assert_eq!(rc, 0);
    let status = child.wait().unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(
        status.signal(),
        Some(signal),
        "the signal still ends the run: {status:?}"
    );

    let traces = std::fs::read_to_string(root.path().join("interrupted/traces.jsonl")).unwrap();
    for epoch in ["0", "1"] {
        let needle = format!("{{\"key\":\"ml.epoch\",\"value\":{{\"intValue\":\"{epoch}\"}}}}");
        assert!(traces.contains(&needle), "epoch {epoch} was not flushed");
    }
    assert!(traces.matches("\"name\":\"step\"").count() >= 10);
}

#[test]
fn on_sigterm() {
    interrupt_after_two_epochs(libc::SIGTERM);
}

#[test]
fn on_sigint() {
    interrupt_after_two_epochs(libc::SIGINT);
}

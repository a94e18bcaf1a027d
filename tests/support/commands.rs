//! Commands run as a user runs them, for the tests of the `gpuspan` command: to their end,
//! with their exit code and what they printed, or waited on within a bound.

use std::path::Path;
use std::process::{Child, Command, ExitStatus, Output};
use std::time::{Duration, Instant};

/// Runs `command` to its end: its exit code (-1 when a signal ended it), stdout and stderr.
pub fn outcome(command: &mut Command) -> (i32, String, String) {
    let out = command.output().expect("the command starts");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Runs `command` to its end and returns what it printed; fails the test with its stderr
/// unless it exited 0.
pub fn succeeded(command: &mut Command) -> Output {
    let out = command.output().expect("the command starts");
    assert!(
        out.status.success(),
        "{:?} ended {}: {}",
        command.get_program(),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

/// The lines of `printed` with each run of white space folded to one space, so that a test
/// reads a table's rows without their padding.
pub fn folded_lines(printed: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(printed)
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect()
}

/// Waits for `child` to end, for at most `timeout`; kills it and fails the test if it
/// runs on.
pub fn wait_within(child: &mut Child, timeout: Duration) -> ExitStatus {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(status) = child.try_wait().expect("wait for the child") {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("process {} did not end within {timeout:?}", child.id());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Sets up `command` (`gpuspan run` or what starts it) as a run that stays on the machine:
/// it works in `dir`, writes its runs under `dir/runs`, reads the NVML library at
/// `nvml_lib`, and exports nothing.
pub fn kept_local<'a>(command: &'a mut Command, dir: &Path, nvml_lib: &Path) -> &'a mut Command {
    command
        .current_dir(dir)
        .env("GPUSPAN_NVML_LIB", nvml_lib)
        .env("GPUSPAN_RUN_DIR", dir.join("runs"))
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .env("OTEL_TRACES_EXPORTER", "none")
        .env("OTEL_METRICS_EXPORTER", "none")
}

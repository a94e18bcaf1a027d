//! A SIGHUP sent to `gpuspan run`'s process group (the shell closing its terminal hangs up
//! each of its jobs this way, as does a supervisor's `kill -HUP -<pgid>`) reaches the
//! command, which runs in a group of its own, as it would have reached it without gpuspan;
//! gpuspan then ends as the command did, its spans written, rather than dying at once and
//! leaving the command running.

use gpuspan_test_support as support;

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use support::commands::wait_within;
use support::example::clean_command;
use support::fake_nvml::FakeNvml;
use support::terminal::without_a_terminal;

/// Waits for `name` in `dir`, while gpuspan runs.
fn wait_for(dir: &Path, name: &str, gpuspan: &mut std::process::Child) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !dir.join(name).exists() {
        assert!(
            gpuspan.try_wait().unwrap().is_none(),
            "gpuspan ended before {name} was written"
        );
        assert!(Instant::now() < deadline, "{name} was never written");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn a_sighup_to_gpuspan_s_group_reaches_the_command_and_gpuspan_ends_as_it_did() {
    let fake = FakeNvml::build();
    let dir = tempfile::tempdir().unwrap();
    // The command notes the hangup and exits 3; left alone it would sleep on.
    let script = "trap 'echo hup > got; kill $! 2>/dev/null; exit 3' HUP; \
                  sleep 30 & echo $$ > pid.tmp && mv pid.tmp pid; wait";
    let mut gpuspan = clean_command(
        env!("CARGO_BIN_EXE_gpuspan"),
        &["run", "--", "sh", "-c", script],
        &[("GPUSPAN_NVML_LIB", fake.path().to_str().unwrap())],
    );
    gpuspan
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    without_a_terminal(&mut gpuspan);
    let mut gpuspan = gpuspan.spawn().unwrap();
    wait_for(dir.path(), "pid", &mut gpuspan);
    let command: libc::pid_t = std::fs::read_to_string(dir.path().join("pid"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // SAFETY: signals the process group of the gpuspan this test started.
    unsafe { libc::kill(-(gpuspan.id() as libc::pid_t), libc::SIGHUP) };
    let status = wait_within(&mut gpuspan, Duration::from_secs(60));
    let got = dir.path().join("got").exists();
    if !got {
        // SAFETY: the command this test's gpuspan started, left running.
        unsafe { libc::kill(-command, libc::SIGKILL) };
    }
    assert!(
        got,
        "the command never got the SIGHUP (gpuspan ended {status})"
    );
    assert_eq!(
        status.code(),
        Some(3),
        "gpuspan did not end as its command did: {status}"
    );
}

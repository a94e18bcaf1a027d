//! `gpuspan run` under an interactive shell with job control. Its command runs in a process
//! group of its own, given the terminal while it runs, so a Ctrl-Z stops the command
//! alone: gpuspan sees it, takes the terminal back and stops its own job, so the shell gets
//! its prompt back; `fg` continues both, and a Ctrl-C then reaches the command once. Started
//! in the background (`gpuspan run ... &`), gpuspan leaves the terminal to the shell and is
//! never stopped for touching it. Started by a script, in the script's process group, it
//! leaves the terminal to that group, so a Ctrl-C reaches every command of the script's
//! gpuspans, once.

use gpuspan_test_support as support;

use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use support::fake_nvml::FakeNvml;
use support::terminal::{Pty, COUNTER, CTRL_C, CTRL_Z, JOB_SHELL};

/// A script, as a shell script runs commands: in its own process group, SIGINT ignored
/// while it waits. It starts `gpuspan run -- python3 -c COUNTER` twice at once, in the
/// directories `a` and `b`, and exits with the larger exit code.
const SCRIPT: &str = r#"
import signal, subprocess, sys
signal.signal(signal.SIGINT, signal.SIG_IGN)
default = lambda: signal.signal(signal.SIGINT, signal.SIG_DFL)
gpuspan, counter = sys.argv[1], sys.argv[2]
command = [gpuspan, "run", "--", sys.executable, "-c", counter]
runs = [subprocess.Popen(command, cwd=d, preexec_fn=default) for d in ("a", "b")]
sys.exit(max(run.wait() for run in runs))
"#;

/// The job shell on a new terminal, running `gpuspan run -- python3 -c COUNTER` as a job
/// in the foreground (`fg`) or the background (`bg`); files go to `dir`.
fn shell(dir: &Path, fake: &FakeNvml, mode: &str, pty: &Pty) -> Child {
    let gpuspan = env!("CARGO_BIN_EXE_gpuspan");
    shell_running(
        dir,
        fake,
        mode,
        pty,
        &[gpuspan, "run", "--", "python3", "-c", COUNTER],
    )
}

/// The job shell running `job` as a job.
fn shell_running(dir: &Path, fake: &FakeNvml, mode: &str, pty: &Pty, job: &[&str]) -> Child {
    let mut command = Command::new("python3");
    command
        .args(["-c", JOB_SHELL])
        .arg(dir)
        .arg(mode)
        .args(job)
        .current_dir(dir)
        .env("GPUSPAN_NVML_LIB", fake.path())
        .env("GPUSPAN_RUN_DIR", dir.join("runs"))
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .env("OTEL_TRACES_EXPORTER", "none")
        .env("OTEL_METRICS_EXPORTER", "none");
    pty.session_leader(&mut command);
    command.spawn().unwrap()
}

/// Waits for `path` to exist, while `shell` runs; returns its text.
fn wait_for(path: &Path, shell: &mut Child) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(text) = std::fs::read_to_string(path) {
            return text;
        }
        if let Some(status) = shell.try_wait().unwrap() {
            panic!(
                "the shell ended ({status}) before {} appeared",
                path.display()
            );
        }
        assert!(
            Instant::now() < deadline,
            "{} never appeared",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The shell's events, once it has written `last` (or panics after a minute).
fn events_until(dir: &Path, last: &str, shell: &mut Child) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let text = std::fs::read_to_string(dir.join("events")).unwrap_or_default();
        let events: Vec<String> = text.lines().map(str::to_owned).collect();
        if events.iter().any(|e| e.starts_with(last)) {
            return events;
        }
        if shell.try_wait().unwrap().is_some() || Instant::now() > deadline {
            let _ = shell.kill();
            panic!("the shell never wrote {last:?}; events: {events:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The state letter of a process (`T` when stopped), from /proc.
fn state(pid: &str) -> String {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    stat.rsplit_once(") ")
        .and_then(|(_, rest)| rest.split_whitespace().next())
        .unwrap_or("gone")
        .to_owned()
}

#[test]
fn ctrl_z_stops_the_job_fg_resumes_it_and_ctrl_c_then_reaches_the_command_once() {
    let fake = FakeNvml::build();
    let dir = tempfile::tempdir().unwrap();
    let pty = Pty::open();
    let mut shell = shell(dir.path(), &fake, "fg", &pty);
    let output = pty.drain();
    let command = wait_for(&dir.path().join("ready"), &mut shell);
    pty.type_key(CTRL_Z);
    let events = events_until(dir.path(), "stopped", &mut shell);
    assert_eq!(
        events,
        [format!("stopped {}", libc::SIGTSTP)],
        "the shell sees its job (gpuspan) stopped by SIGTSTP"
    );
    assert_eq!(state(&command), "T", "the command is stopped too");
    std::fs::write(dir.path().join("fg"), "").unwrap();
    events_until(dir.path(), "continued", &mut shell);
    let deadline = Instant::now() + Duration::from_secs(30);
    while state(&command) == "T" {
        assert!(Instant::now() < deadline, "the command was never continued");
        std::thread::sleep(Duration::from_millis(10));
    }
    // gpuspan hands the terminal back to the command before it continues it.
    pty.type_key(CTRL_C);
    let events = events_until(dir.path(), "foreground", &mut shell);
    let _ = shell.wait();
    let output = output.join().unwrap();
    let count = std::fs::read_to_string(dir.path().join("count")).unwrap_or_default();
    assert_eq!(count, "1", "SIGINTs the command saw; terminal: {output}");
    assert_eq!(
        events,
        [
            format!("stopped {}", libc::SIGTSTP),
            "continued".to_owned(),
            "exit 7".to_owned(),
            "foreground job".to_owned(),
        ],
        "gpuspan ends with the command's code, the terminal back with its own group; \
         terminal: {output}"
    );
}

#[test]
fn started_in_the_background_it_leaves_the_terminal_to_the_shell_and_is_never_stopped() {
    let fake = FakeNvml::build();
    let dir = tempfile::tempdir().unwrap();
    let pty = Pty::open();
    let mut shell = shell(dir.path(), &fake, "bg", &pty);
    let output = pty.drain();
    wait_for(&dir.path().join("ready"), &mut shell);
    let gpuspan: i32 = wait_for(&dir.path().join("job"), &mut shell)
        .trim()
        .parse()
        .unwrap();
    support::signalled::send(gpuspan, libc::SIGINT);
    let events = events_until(dir.path(), "foreground", &mut shell);
    let _ = shell.wait();
    let output = output.join().unwrap();
    let count = std::fs::read_to_string(dir.path().join("count")).unwrap_or_default();
    assert_eq!(count, "1", "SIGINTs the command saw; terminal: {output}");
    assert_eq!(
        events,
        ["exit 7", "foreground shell"],
        "never stopped, and the shell kept the terminal; terminal: {output}"
    );
}

#[test]
fn a_script_s_two_gpuspans_leave_the_terminal_to_it_and_ctrl_c_reaches_both_commands_once() {
    let fake = FakeNvml::build();
    let dir = tempfile::tempdir().unwrap();
    for run in ["a", "b"] {
        std::fs::create_dir(dir.path().join(run)).unwrap();
    }
    let pty = Pty::open();
    let gpuspan = env!("CARGO_BIN_EXE_gpuspan");
    let job = ["python3", "-c", SCRIPT, gpuspan, COUNTER];
    let mut shell = shell_running(dir.path(), &fake, "fg", &pty, &job);
    let output = pty.drain();
    for run in ["a", "b"] {
        wait_for(&dir.path().join(run).join("ready"), &mut shell);
    }
    pty.type_key(CTRL_C);
    let events = events_until(dir.path(), "foreground", &mut shell);
    let _ = shell.wait();
    let output = output.join().unwrap();
    for run in ["a", "b"] {
        let count = std::fs::read_to_string(dir.path().join(run).join("count")).unwrap_or_default();
        assert_eq!(count, "1", "SIGINTs command {run} saw; terminal: {output}");
    }
    assert_eq!(
        events,
        ["exit 7", "foreground job"],
        "the script's group kept the terminal; terminal: {output}"
    );
}

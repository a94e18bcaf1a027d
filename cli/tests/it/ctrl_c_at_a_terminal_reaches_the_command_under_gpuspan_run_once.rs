//! Under `gpuspan run`, a SIGINT reaches the command exactly once however it is sent: typed
//! at the terminal (Ctrl-C), sent to gpuspan's pid, or sent to gpuspan's whole process
//! group (as job runners, supervisors and `kill -INT -<pgid>` do), with a terminal or
//! without one. Python raises `KeyboardInterrupt` for each SIGINT it gets, so a second one
//! would land in the program's own clean-up. The command's own children get it too, once,
//! as they do from a Ctrl-C.

use gpuspan_test_support as support;

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use support::commands::{kept_local, wait_within};
use support::fake_nvml::FakeNvml;
use support::terminal::{without_a_terminal, Pty, COUNTER, CTRL_C};

/// A command that starts the counter as a child of its own and passes on its exit code; it
/// ignores SIGINT itself (the counter sets its own handler).
const PARENT_OF_COUNTER: &str = r#"
import signal, subprocess, sys
signal.signal(signal.SIGINT, signal.SIG_IGN)
sys.exit(subprocess.call([sys.executable, "-c", sys.argv[1]]))
"#;

fn gpuspan_run(dir: &Path, fake: &FakeNvml, command: &[&str]) -> Command {
    let mut gpuspan = Command::new(env!("CARGO_BIN_EXE_gpuspan"));
    gpuspan.arg("run").arg("--").args(command);
    kept_local(&mut gpuspan, dir, fake.path());
    // SAFETY: resetting the disposition is async-signal-safe. The test harness may have
    // been started with SIGINT ignored (a shell without job control), which the child
    // would inherit.
    unsafe {
        gpuspan.pre_exec(|| {
            libc::signal(libc::SIGINT, libc::SIG_DFL);
            Ok(())
        });
    }
    gpuspan
}

fn counter(dir: &Path, fake: &FakeNvml) -> Command {
    gpuspan_run(dir, fake, &["python3", "-c", COUNTER])
}

fn wait_for_file(path: &Path, child: &mut Child) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !path.exists() {
        if let Some(status) = child.try_wait().unwrap() {
            panic!("gpuspan ended ({status}) before the command was ready");
        }
        assert!(Instant::now() < deadline, "the command never got ready");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The state letter of a process (`T` when stopped), from /proc.
fn state(pid: libc::pid_t) -> String {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    stat.rsplit_once(") ")
        .and_then(|(_, rest)| rest.split_whitespace().next())
        .unwrap_or("gone")
        .to_owned()
}

/// How SIGINT is sent to gpuspan once the command is ready.
#[derive(Clone, Copy)]
enum Sent {
    /// Ctrl-C typed at the terminal.
    CtrlC,
    /// `kill -INT <gpuspan's pid>`.
    ToThePid,
    /// `kill -INT -<gpuspan's process group>`.
    ToTheGroup,
}

/// Starts `gpuspan` (in a new session, with the pty as its controlling terminal or with
/// none), sends SIGINT as `sent` says once the command is ready, and returns how many
/// SIGINTs the counter saw, with gpuspan's exit code.
fn count_sigints(mut gpuspan: Command, dir: &Path, terminal: bool, sent: Sent) -> (String, i32) {
    let pty = Pty::open();
    if terminal {
        pty.session_leader(&mut gpuspan);
    } else {
        gpuspan
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        without_a_terminal(&mut gpuspan);
    }
    let mut child = gpuspan.spawn().unwrap();
    drop(gpuspan);
    let output = terminal.then(|| pty.drain());
    let pid = child.id() as libc::pid_t;
    let _gpuspan = support::signalled::KilledOnPanic(vec![pid]);
    wait_for_file(&dir.join("ready"), &mut child);
    // The counter runs in the command's process group, which gpuspan's end would not end.
    let counter: libc::pid_t = std::fs::read_to_string(dir.join("ready"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // SAFETY: getpgid has no memory-safety preconditions.
    let group = unsafe { libc::getpgid(counter) };
    let mut command = vec![counter];
    if group > 1 {
        command.push(-group);
    }
    let _command = support::signalled::KilledOnPanic(command);
    // gpuspan is held stopped while the signal is sent, as a busy machine may hold it: a
    // SIGINT the command got directly is then handled before any gpuspan passes on, and two
    // cannot merge into one while pending.
    support::signalled::send(pid, libc::SIGSTOP);
    while state(pid) != "T" {
        std::thread::sleep(Duration::from_millis(5));
    }
    match sent {
        Sent::CtrlC => pty.type_key(CTRL_C),
        // gpuspan leads its session, so its group's id is its pid.
        Sent::ToThePid => support::signalled::send(pid, libc::SIGINT),
        Sent::ToTheGroup => support::signalled::send(-pid, libc::SIGINT),
    }
    std::thread::sleep(Duration::from_millis(300));
    support::signalled::send(pid, libc::SIGCONT);
    let status = wait_within(&mut child, Duration::from_secs(60));
    let count = std::fs::read_to_string(dir.join("count")).unwrap_or_default();
    // Once every process holding the terminal has ended, reading it fails and the drain ends.
    let output = output.map(|o| o.join().unwrap()).unwrap_or_default();
    assert_eq!(status.code(), Some(7), "gpuspan's exit code; {output}");
    (count, status.code().unwrap_or(-1))
}

fn once(terminal: bool, sent: Sent) {
    let fake = FakeNvml::build();
    let dir = tempfile::tempdir().unwrap();
    let (count, _) = count_sigints(counter(dir.path(), &fake), dir.path(), terminal, sent);
    assert_eq!(count, "1", "SIGINTs the command saw");
}

#[test]
fn ctrl_c_typed_at_the_terminal_reaches_the_command_once() {
    once(true, Sent::CtrlC);
}

#[test]
fn a_sigint_sent_to_gpuspan_s_pid_at_a_terminal_reaches_the_command_once() {
    once(true, Sent::ToThePid);
}

#[test]
fn a_sigint_sent_to_gpuspan_s_process_group_at_a_terminal_reaches_the_command_once() {
    once(true, Sent::ToTheGroup);
}

#[test]
fn a_sigint_sent_to_gpuspan_s_pid_without_a_terminal_reaches_the_command_once() {
    once(false, Sent::ToThePid);
}

#[test]
fn a_sigint_sent_to_gpuspan_s_process_group_without_a_terminal_reaches_the_command_once() {
    once(false, Sent::ToTheGroup);
}

/// The command's children are in its process group, as a Ctrl-C finds them: a SIGINT
/// gpuspan passes on reaches them too, once.
#[test]
fn a_sigint_passed_on_reaches_the_command_s_children_once() {
    let fake = FakeNvml::build();
    let dir = tempfile::tempdir().unwrap();
    for sent in [Sent::ToThePid, Sent::ToTheGroup] {
        let _ = std::fs::remove_file(dir.path().join("ready"));
        let _ = std::fs::remove_file(dir.path().join("count"));
        let gpuspan = gpuspan_run(
            dir.path(),
            &fake,
            &["python3", "-c", PARENT_OF_COUNTER, COUNTER],
        );
        let (count, _) = count_sigints(gpuspan, dir.path(), false, sent);
        assert_eq!(count, "1", "SIGINTs the command's child saw");
    }
}

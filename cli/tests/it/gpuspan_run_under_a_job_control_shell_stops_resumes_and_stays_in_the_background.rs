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
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use support::commands::kept_local;
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

/// The job shell on a new terminal of its own, in a directory of its own, running a job.
struct Session {
    dir: tempfile::TempDir,
    pty: Pty,
    shell: Child,
    /// What the terminal showed, once every program on it has ended.
    output: Option<JoinHandle<String>>,
    _fake: FakeNvml,
}

impl Session {
    /// The job shell running `job` as a job in the foreground (`fg`) or the background
    /// (`bg`), in a new directory that holds the directories `subdirs` (where the job's
    /// commands run).
    fn start(mode: &str, job: &[&str], subdirs: &[&str]) -> Session {
        let fake = FakeNvml::build();
        let dir = tempfile::tempdir().unwrap();
        for subdir in subdirs {
            std::fs::create_dir(dir.path().join(subdir)).unwrap();
        }
        let pty = Pty::open();
        let mut command = Command::new("python3");
        command
            .args(["-c", JOB_SHELL])
            .arg(dir.path())
            .arg(mode)
            .args(job);
        kept_local(&mut command, dir.path(), fake.path());
        pty.session_leader(&mut command);
        let shell = command.spawn().unwrap();
        let output = Some(pty.drain());
        Session {
            dir,
            pty,
            shell,
            output,
            _fake: fake,
        }
    }

    /// The job shell running `gpuspan run -- python3 -c COUNTER` as a job in `mode`.
    fn counter(mode: &str) -> Session {
        let gpuspan = env!("CARGO_BIN_EXE_gpuspan");
        Session::start(mode, &[gpuspan, "run", "--", "python3", "-c", COUNTER], &[])
    }

    /// Waits for the file `name` to exist, while the shell runs; returns its text.
    fn wait_for(&mut self, name: impl AsRef<Path>) -> String {
        let path = self.dir.path().join(name);
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(text) = std::fs::read_to_string(&path) {
                return text;
            }
            if let Some(status) = self.shell.try_wait().unwrap() {
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
    fn events_until(&mut self, last: &str) -> Vec<String> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let text = std::fs::read_to_string(self.dir.path().join("events")).unwrap_or_default();
            let events: Vec<String> = text.lines().map(str::to_owned).collect();
            if events.iter().any(|e| e.starts_with(last)) {
                return events;
            }
            if self.shell.try_wait().unwrap().is_some() || Instant::now() > deadline {
                let _ = self.shell.kill();
                panic!("the shell never wrote {last:?}; events: {events:?}");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Waits for the job to end and the shell to say whose group then held the terminal,
    /// and for the shell to end; checks that the counter in each of `subdirs` saw one
    /// SIGINT. Returns the shell's events and what the terminal showed.
    fn end(&mut self, subdirs: &[&str]) -> (Vec<String>, String) {
        let events = self.events_until("foreground");
        let _ = self.shell.wait();
        let output = self.output.take().expect("the session ends once");
        let output = output.join().unwrap();
        for subdir in subdirs {
            let count = std::fs::read_to_string(self.dir.path().join(subdir).join("count"))
                .unwrap_or_default();
            assert_eq!(
                count, "1",
                "SIGINTs the command in {subdir} saw; terminal: {output}"
            );
        }
        (events, output)
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
    let mut session = Session::counter("fg");
    let command = session.wait_for("ready");
    session.pty.type_key(CTRL_Z);
    let events = session.events_until("stopped");
    assert_eq!(
        events,
        [format!("stopped {}", libc::SIGTSTP)],
        "the shell sees its job (gpuspan) stopped by SIGTSTP"
    );
    assert_eq!(state(&command), "T", "the command is stopped too");
    std::fs::write(session.dir.path().join("fg"), "").unwrap();
    session.events_until("continued");
    let deadline = Instant::now() + Duration::from_secs(30);
    while state(&command) == "T" {
        assert!(Instant::now() < deadline, "the command was never continued");
        std::thread::sleep(Duration::from_millis(10));
    }
    // gpuspan hands the terminal back to the command before it continues it.
    session.pty.type_key(CTRL_C);
    let (events, output) = session.end(&["."]);
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
    let mut session = Session::counter("bg");
    session.wait_for("ready");
    let gpuspan: i32 = session.wait_for("job").trim().parse().unwrap();
    support::signalled::send(gpuspan, libc::SIGINT);
    let (events, output) = session.end(&["."]);
    assert_eq!(
        events,
        ["exit 7", "foreground shell"],
        "never stopped, and the shell kept the terminal; terminal: {output}"
    );
}

#[test]
fn a_script_s_two_gpuspans_leave_the_terminal_to_it_and_ctrl_c_reaches_both_commands_once() {
    let gpuspan = env!("CARGO_BIN_EXE_gpuspan");
    let job = ["python3", "-c", SCRIPT, gpuspan, COUNTER];
    let mut session = Session::start("fg", &job, &["a", "b"]);
    for run in ["a", "b"] {
        session.wait_for(Path::new(run).join("ready"));
    }
    session.pty.type_key(CTRL_C);
    let (events, output) = session.end(&["a", "b"]);
    assert_eq!(
        events,
        ["exit 7", "foreground job"],
        "the script's group kept the terminal; terminal: {output}"
    );
}

//! Third-party servers for the collector tests (rotel, the MLflow tracking server,
//! Prometheus): installed by `tests/collectors/install.sh` once per test process, started on
//! free loopback ports, and stopped when their [`Server`] guard drops.

use std::fs::File;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The installed programs.
#[derive(Debug)]
pub struct Tools {
    /// rotel's agent binary (from the `rotel` wheel).
    pub rotel: PathBuf,
    /// The `mlflow` command of the venv.
    pub mlflow: PathBuf,
    /// Debian's `prometheus`.
    pub prometheus: PathBuf,
    /// Debian's `promtool`.
    pub promtool: PathBuf,
}

const INSTALL_SCRIPT: &str = "tests/collectors/install.sh";

/// Runs the install script (once per process) and returns where the programs are. Panics,
/// naming the script, when it fails: a missing tool fails its test, it never skips it.
pub fn tools() -> &'static Tools {
    static TOOLS: OnceLock<Tools> = OnceLock::new();
    TOOLS.get_or_init(|| {
        let root = crate::repo_root();
        let started = Instant::now();
        let output = Command::new("bash")
            .arg(root.join(INSTALL_SCRIPT))
            .current_dir(root)
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("running {INSTALL_SCRIPT} with bash: {e}"));
        assert!(
            output.status.success(),
            "{INSTALL_SCRIPT} failed ({}), so rotel, MLflow or Prometheus is not installed; \
             run it by hand to see why:\n{}{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        let took = started.elapsed();
        if took > Duration::from_secs(2) {
            eprintln!("{INSTALL_SCRIPT} took {:.1} s", took.as_secs_f64());
        }
        let bin = std::env::var_os("COLLECTORS_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| root.join("target/collectors"))
            .join("bin");
        let tool = |name: &str| {
            let path = bin.join(name);
            assert!(
                path.exists(),
                "{INSTALL_SCRIPT} succeeded but left no {}",
                path.display()
            );
            path
        };
        Tools {
            rotel: tool("rotel"),
            mlflow: tool("mlflow"),
            prometheus: tool("prometheus"),
            promtool: tool("promtool"),
        }
    })
}

/// A loopback port that was free a moment ago (the OS picked it; the listener is closed).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("binding a loopback port")
        .port()
}

/// Whether something accepts TCP connections at `addr`.
pub fn accepts(addr: SocketAddr) -> bool {
    TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok()
}

/// A server process started by a test, in its own process group, with stdout and stderr in
/// one log file. Dropping it stops the whole group (SIGTERM, then SIGKILL after 10 s) and
/// reaps the process: nothing is left running.
pub struct Server {
    name: String,
    child: Child,
    log: PathBuf,
    reaped: bool,
}

impl Server {
    /// Starts `command` with its output appended to `log`.
    pub fn start(name: &str, mut command: Command, log: &Path) -> Server {
        let out = File::create(log).unwrap_or_else(|e| panic!("creating {}: {e}", log.display()));
        let err = out.try_clone().expect("duplicating the log file handle");
        command
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .process_group(0);
        let child = command
            .spawn()
            .unwrap_or_else(|e| panic!("starting {name} ({command:?}): {e}"));
        Server {
            name: name.to_string(),
            child,
            log: log.to_path_buf(),
            reaped: false,
        }
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Everything the server has printed so far.
    pub fn output(&self) -> String {
        let bytes = std::fs::read(&self.log).unwrap_or_default();
        strip_ansi(&String::from_utf8_lossy(&bytes))
    }

    /// The last lines of the output, for failure messages.
    pub fn output_tail(&self) -> String {
        let output = self.output();
        let lines: Vec<&str> = output.lines().collect();
        lines[lines.len().saturating_sub(60)..].join("\n")
    }

    /// Panics, with the server's output, if it has exited.
    pub fn assert_running(&mut self) {
        if let Some(code) = self.exit_code() {
            panic!(
                "{} exited (code or signal {code}) before the test was done; its output:\n{}",
                self.name,
                self.output_tail()
            );
        }
    }

    /// The exit code (or signal) if the process has exited, without reaping it: while it
    /// is not reaped its id, which is also its process group's, cannot be reused.
    fn exit_code(&self) -> Option<i32> {
        let pid = libc::id_t::from(self.child.id());
        // SAFETY: waitid only writes the zeroed siginfo_t it is given.
        unsafe {
            let mut info: libc::siginfo_t = std::mem::zeroed();
            let rc = libc::waitid(
                libc::P_PID,
                pid,
                &mut info,
                libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
            );
            (rc == 0 && info.si_pid() != 0).then(|| info.si_status())
        }
    }

    /// Polls `ready` every 100 ms until it returns `Some`, for at most `timeout`; panics with
    /// the server's output if the server exits or time runs out.
    pub fn wait_for<T>(
        &mut self,
        what: &str,
        timeout: Duration,
        mut ready: impl FnMut(&Server) -> Option<T>,
    ) -> T {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(value) = ready(self) {
                return value;
            }
            self.assert_running();
            if Instant::now() > deadline {
                panic!(
                    "{}: no {what} within {} s; its output:\n{}",
                    self.name,
                    timeout.as_secs(),
                    self.output_tail()
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Stops the server now (see the type's documentation) and returns its output.
    pub fn stop(mut self) -> String {
        self.terminate();
        self.output()
    }

    fn terminate(&mut self) {
        let Ok(pid) = i32::try_from(self.child.id()) else {
            return;
        };
        if self.reaped {
            return;
        }
        if self.exit_code().is_none() {
            // SAFETY: plain syscall; the group is the child's own (process_group(0)), and the
            // child is not reaped yet, so its id cannot have been reused.
            unsafe { libc::kill(-pid, libc::SIGTERM) };
            let deadline = Instant::now() + Duration::from_secs(10);
            while self.exit_code().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        // The leader may be gone (an unreaped zombie still holds the group id) while workers
        // it started are not: kill what is left of the group, then reap the leader.
        // SAFETY: as above.
        unsafe { libc::kill(-pid, libc::SIGKILL) };
        let _ = self.child.wait();
        self.reaped = true;
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.terminate();
    }
}

/// Removes ANSI colour sequences (rotel colours its log lines).
fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' && chars.peek() == Some(&'[') {
            chars.next();
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

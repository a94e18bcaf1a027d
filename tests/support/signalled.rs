//! Running the `checkpoint_on_sigterm` example as a separate process and signalling it.

use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::receiver::{Protocol, Receiver};

/// The running example, its stdout lines and its checkpoint path.
pub struct Program {
    child: Child,
    lines: mpsc::Receiver<String>,
    dir: tempfile::TempDir,
    pub stderr: Arc<std::sync::Mutex<String>>,
}

impl Program {
    /// Starts the example with `--handler handler` and `extra` arguments, every gpuspan
    /// and OTel variable of the test process cleared, then `envs` set.
    pub fn start(handler: &str, extra: &[&str], envs: &[(&str, &str)]) -> Program {
        let dir = tempfile::tempdir().unwrap();
        let checkpoint = dir.path().join("checkpoint.txt");
        let mut command = Command::new(crate::example::example_binary("checkpoint_on_sigterm"));
        crate::terminal::with_default_signals(&mut command);
        command
            .args(["--handler", handler, "--checkpoint"])
            .arg(&checkpoint)
            .args(extra);
        for (key, _) in std::env::vars() {
            if key.starts_with("OTEL_") || key.starts_with("GPUSPAN_") {
                command.env_remove(key);
            }
        }
        command
            .env("GPUSPAN_NVML_LIB", "/nonexistent/libnvidia-ml.so.1")
            .env("GPUSPAN_RUN_DIR", dir.path().join("runs"))
            .env("GPUSPAN_RUN_ID", "run")
            .envs(envs.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = command.spawn().expect("the example starts");
        let (tx, lines) = mpsc::channel();
        let stdout = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let stderr = Arc::new(std::sync::Mutex::new(String::new()));
        let errors = child.stderr.take().unwrap();
        let sink = Arc::clone(&stderr);
        std::thread::spawn(move || {
            for line in BufReader::new(errors).lines() {
                let Ok(line) = line else { break };
                let mut all = sink.lock().unwrap();
                all.push_str(&line);
                all.push('\n');
            }
        });
        Program {
            child,
            lines,
            dir,
            stderr,
        }
    }

    /// Starts the example as [`Program::start`] does, exporting to `receiver` over its
    /// protocol, with `envs` set besides.
    pub fn start_exporting_to(
        receiver: &Receiver,
        handler: &str,
        extra: &[&str],
        envs: &[(&str, &str)],
    ) -> Program {
        let endpoint = receiver.endpoint();
        let protocol = match receiver.protocol() {
            Protocol::Grpc => "grpc",
            Protocol::Http => "http/protobuf",
        };
        let mut all = vec![
            ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint.as_str()),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", protocol),
        ];
        all.extend_from_slice(envs);
        Program::start(handler, extra, &all)
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    /// Reads stdout until a line starts with `prefix`; fails after `timeout`.
    pub fn wait_for_line(&self, prefix: &str, timeout: Duration) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) if line.starts_with(prefix) => return line,
                Ok(_) => {}
                Err(_) => panic!(
                    "no line starting with {prefix:?} within {timeout:?}; stderr:\n{}",
                    self.stderr.lock().unwrap()
                ),
            }
        }
    }

    /// Sends `signal` to the example.
    pub fn signal(&self, signal: i32) {
        send(self.pid(), signal);
    }

    /// Sends `signal` and waits until the kernel has delivered it (it is no longer pending
    /// for the process or any of its threads): a second one sent after this is a second
    /// signal, not one the kernel merges with the first while the process is slow to run.
    pub fn signal_delivered(&self, signal: i32) {
        self.signal(signal);
        let bit = 1u64 << (signal - 1);
        let pending = |status: &str| {
            status
                .lines()
                .filter(|l| l.starts_with("ShdPnd:") || l.starts_with("SigPnd:"))
                .filter_map(|l| u64::from_str_radix(l.split_whitespace().nth(1)?, 16).ok())
                .any(|mask| mask & bit != 0)
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        let tasks = format!("/proc/{}/task", self.pid());
        loop {
            let still = std::fs::read_dir(&tasks)
                .map(|dir| {
                    dir.flatten().any(|task| {
                        std::fs::read_to_string(task.path().join("status"))
                            .is_ok_and(|status| pending(&status))
                    })
                })
                .unwrap_or(false);
            if !still {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "signal {signal} still pending after 30 s"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Waits for the example to end; fails after `timeout`.
    pub fn wait(&mut self, timeout: Duration) -> ExitStatus {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "the example still runs {timeout:?} after the signal; stderr:\n{}",
                self.stderr.lock().unwrap()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// What the example's handler wrote, if it ran.
    pub fn checkpoint(&self) -> Option<String> {
        std::fs::read_to_string(self.dir.path().join("checkpoint.txt")).ok()
    }

    /// The run directory (used when no OTLP endpoint is set).
    pub fn run_dir(&self) -> PathBuf {
        self.dir.path().join("runs").join("run")
    }
}

impl Drop for Program {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            send(self.pid(), libc::SIGKILL);
            let _ = self.child.wait();
        }
    }
}

/// Asserts that `receiver` holds what the example completed before it printed `epoch 1
/// done`: epochs 0 and 1 and their ten steps. `stderr` is the example's, for the message.
pub fn assert_the_first_two_epochs_arrived(receiver: &Receiver, stderr: &str) {
    let epochs: Vec<i64> = receiver
        .spans_named("epoch")
        .iter()
        .filter_map(|span| span.int_attr("ml.epoch"))
        .collect();
    assert!(
        epochs.contains(&0) && epochs.contains(&1),
        "epochs 0 and 1 were completed before the signal; received {epochs:?}; stderr:\n{stderr}"
    );
    let steps = receiver.spans_named("step").len();
    assert!(
        steps >= 10,
        "only {steps} step spans arrived; stderr:\n{stderr}"
    );
}

/// Sends `signal` to the process `pid`.
pub fn send(pid: i32, signal: i32) {
    // SAFETY: kill has no memory-safety preconditions.
    let rc = unsafe { libc::kill(pid, signal) };
    assert_eq!(rc, 0, "kill({pid}, {signal})");
}

/// Kills its processes (a negative id: a process group) with SIGKILL when a test panics
/// while they may still run, so a failed test leaves nothing behind, stopped or not.
pub struct KilledOnPanic(pub Vec<i32>);

impl Drop for KilledOnPanic {
    fn drop(&mut self) {
        if std::thread::panicking() {
            for &pid in self.0.iter().filter(|pid| !matches!(pid, -1..=1)) {
                // SAFETY: kill has no memory-safety preconditions.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
    }
}

/// The signal that ended a process, if one did.
pub fn killed_by(status: ExitStatus) -> Option<i32> {
    status.signal()
}

/// A collector that accepts connections and never answers on them.
pub struct SilentCollector {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl SilentCollector {
    pub fn start() -> SilentCollector {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let stopping = Arc::clone(&stop);
        let thread = std::thread::spawn(move || {
            let mut held = Vec::new();
            for stream in listener.incoming() {
                if stopping.load(Ordering::SeqCst) {
                    break;
                }
                if let Ok(stream) = stream {
                    held.push(stream);
                }
            }
        });
        SilentCollector {
            addr,
            stop,
            thread: Some(thread),
        }
    }

    /// `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for SilentCollector {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop so it sees the stop flag.
        let _ = TcpStream::connect(self.addr);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

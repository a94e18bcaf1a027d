//! One run of `nvidia-smi`: started in a process group of its own, its output read on a
//! thread so the wait can give up, killed with everything it started when it takes too long.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use super::parse::{clip, SmiParseError};
use super::FIELDS;

/// The most output kept from one run; nvidia-smi prints about 100 bytes per device.
const OUTPUT_LIMIT: u64 = 1 << 20;

/// Why a run of `nvidia-smi` gave no figures.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SmiError {
    /// The program could not be started.
    #[error("{} could not be run ({source})", .program.display())]
    Spawn {
        program: PathBuf,
        source: std::io::Error,
    },
    /// It was started without the pipes asked for.
    #[error("{} could not be run (no output pipe)", .program.display())]
    NoPipe { program: PathBuf },
    /// No thread could be started to read its output.
    #[error("{} could not be read (no thread: {source})", .program.display())]
    NoThread {
        program: PathBuf,
        source: std::io::Error,
    },
    /// Its output could not be read.
    #[error("{} output could not be read ({source})", .program.display())]
    Read {
        program: PathBuf,
        source: std::io::Error,
    },
    /// It did not finish in time and was killed.
    #[error("{} did not answer within {timeout:?} and was killed", .program.display())]
    Timeout { program: PathBuf, timeout: Duration },
    /// Its exit could not be waited for.
    #[error("{} could not be waited for ({source})", .program.display())]
    Wait {
        program: PathBuf,
        source: std::io::Error,
    },
    /// It exited with a failure; `said` is the first line it printed.
    #[error("{} failed ({status}): {said}", .program.display())]
    Failed {
        program: PathBuf,
        status: std::process::ExitStatus,
        said: String,
    },
    /// It printed output that cannot be read.
    #[error(transparent)]
    Parse(#[from] SmiParseError),
}

/// Runs the query and returns its standard output, or why it failed. The program runs in a
/// process group of its own, so that on timeout everything it started is killed too.
pub(super) fn run_query(program: &Path, timeout: Duration) -> Result<String, SmiError> {
    use std::os::unix::process::CommandExt;
    let started = Instant::now();
    let program = program.to_path_buf();
    let mut child = match Command::new(&program)
        .arg(format!("--query-gpu={}", FIELDS.join(",")))
        .arg("--format=csv,noheader,nounits")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
    {
        Ok(child) => child,
        Err(source) => return Err(SmiError::Spawn { program, source }),
    };
    let (Some(stdout), Some(stderr)) = (child.stdout.take(), child.stderr.take()) else {
        stop(child);
        return Err(SmiError::NoPipe { program });
    };
    // The pipes are read on a thread of their own so that the wait below can give up.
    let (sender, receiver) = mpsc::channel();
    let reader = std::thread::Builder::new()
        .name("gpuspan-nvidia-smi".into())
        .spawn(move || {
            let mut out = Vec::new();
            let mut err = Vec::new();
            let read = stdout.take(OUTPUT_LIMIT).read_to_end(&mut out);
            // nvidia-smi writes little to stderr: reading it second cannot block for long.
            let _ = stderr.take(OUTPUT_LIMIT).read_to_end(&mut err);
            let _ = sender.send(read.map(|_| (out, err)));
        });
    if let Err(source) = reader {
        stop(child);
        return Err(SmiError::NoThread { program, source });
    }
    let (out, err) = match receiver.recv_timeout(timeout.saturating_sub(started.elapsed())) {
        Ok(Ok(output)) => output,
        Ok(Err(source)) => {
            stop(child);
            return Err(SmiError::Read { program, source });
        }
        Err(_) => {
            stop(child);
            return Err(SmiError::Timeout { program, timeout });
        }
    };
    // The pipes are closed; the program has exited or is about to.
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if started.elapsed() < timeout => std::thread::sleep(Duration::from_millis(1)),
            Ok(None) => {
                stop(child);
                return Err(SmiError::Timeout { program, timeout });
            }
            Err(source) => {
                stop(child);
                return Err(SmiError::Wait { program, source });
            }
        }
    };
    let out = String::from_utf8_lossy(&out).into_owned();
    if status.success() {
        return Ok(out);
    }
    let err = String::from_utf8_lossy(&err);
    let said = out
        .lines()
        .chain(err.lines())
        .map(str::trim)
        .find(|line| !line.is_empty())
        .unwrap_or("no message");
    Err(SmiError::Failed {
        program,
        status,
        said: clip(said),
    })
}

/// Kills the child's process group and reaps the child without blocking: a process stuck in
/// the driver may take a while to die, and is then reaped on a thread of its own.
fn stop(mut child: Child) {
    if let Ok(pid) = libc::pid_t::try_from(child.id()) {
        // SAFETY: kill(2) takes plain integers and touches no memory. The child is not reaped
        // yet, so its id still names its process group (it was started as the group leader).
        unsafe {
            libc::kill(-pid, libc::SIGKILL);
        }
    }
    let _ = child.kill();
    if !matches!(child.try_wait(), Ok(Some(_))) {
        let _ = std::thread::Builder::new()
            .name("gpuspan-nvidia-smi-reaper".into())
            .spawn(move || {
                let _ = child.wait();
            });
    }
}

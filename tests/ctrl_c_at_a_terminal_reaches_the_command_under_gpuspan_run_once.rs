//! Under `gpuspan run`, the command shares gpuspan's process group, so a Ctrl-C typed at
//! the terminal reaches it directly: gpuspan must not pass on a second SIGINT (Python would
//! raise `KeyboardInterrupt` twice). A SIGINT sent to gpuspan alone (`kill -INT <pid>`)
//! still reaches the command, once.
#![cfg(feature = "collect")]

use gpuspan_test_support as support;

use std::ffi::CStr;
use std::fs::File;
use std::io::Write;
use std::os::fd::FromRawFd;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use support::fake_nvml::FakeNvml;

/// Counts the SIGINTs the process is sent, by the bytes Python's C-level handler writes to
/// the wakeup fd (one per delivered signal, so two in a row are never merged into one
/// Python handler call). It says it is ready through a file, waits until one second after
/// the first SIGINT, writes the count, and exits with 7.
const COUNTER: &str = r#"
import os, select, signal, sys, time
r, w = os.pipe()
os.set_blocking(w, False)
signal.set_wakeup_fd(w)
signal.signal(signal.SIGINT, lambda *_: None)
open("ready", "w").close()
count, first = 0, None
deadline = time.monotonic() + 30
while time.monotonic() < deadline and (first is None or time.monotonic() < first + 1.0):
    if select.select([r], [], [], 0.05)[0]:
        for b in os.read(r, 64):
            if b == signal.SIGINT:
                count += 1
                first = first or time.monotonic()
with open("count", "w") as f:
    f.write(str(count))
sys.exit(7)
"#;

fn gpuspan_run(dir: &Path, fake: &FakeNvml) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_gpuspan"));
    command
        .args(["run", "--", "python3", "-c", COUNTER])
        .current_dir(dir)
        .env("GPUSPAN_NVML_LIB", fake.path())
        .env("GPUSPAN_RUN_DIR", dir.join("runs"))
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .env("OTEL_TRACES_EXPORTER", "none")
        .env("OTEL_METRICS_EXPORTER", "none");
    // SAFETY: resetting the disposition is async-signal-safe. The test harness may have
    // been started with SIGINT ignored (a shell without job control), which the child
    // would inherit.
    unsafe {
        command.pre_exec(|| {
            libc::signal(libc::SIGINT, libc::SIG_DFL);
            Ok(())
        });
    }
    command
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

fn wait_with_timeout(child: &mut Child, timeout: Duration) -> ExitStatus {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("gpuspan run did not end within {timeout:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A pseudo-terminal: the master (the terminal's side) and the slave's path.
fn open_pty() -> (File, String) {
    // SAFETY: plain libc calls on a descriptor we own; ptsname_r writes into our buffer.
    unsafe {
        let master = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY);
        assert!(
            master >= 0,
            "posix_openpt: {}",
            std::io::Error::last_os_error()
        );
        assert_eq!(libc::grantpt(master), 0);
        assert_eq!(libc::unlockpt(master), 0);
        let mut name = [0 as libc::c_char; 128];
        assert_eq!(libc::ptsname_r(master, name.as_mut_ptr(), name.len()), 0);
        let slave = CStr::from_ptr(name.as_ptr()).to_str().unwrap().to_owned();
        (File::from_raw_fd(master), slave)
    }
}

#[test]
fn ctrl_c_typed_at_the_terminal_reaches_the_command_once() {
    let fake = FakeNvml::build();
    let dir = tempfile::tempdir().unwrap();
    let (mut master, slave_path) = open_pty();
    let slave = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&slave_path)
        .unwrap();
    let mut command = gpuspan_run(dir.path(), &fake);
    command
        .stdin(Stdio::from(slave.try_clone().unwrap()))
        .stdout(Stdio::from(slave.try_clone().unwrap()))
        .stderr(Stdio::from(slave));
    // A new session whose controlling terminal is the pty, as a login shell's: gpuspan and
    // the command are its foreground process group.
    // SAFETY: setsid and ioctl are async-signal-safe.
    unsafe {
        command.pre_exec(|| {
            if libc::setsid() < 0 || libc::ioctl(0, libc::TIOCSCTTY as _, 0) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut gpuspan = command.spawn().unwrap();
    drop(command);
    // The terminal's output is drained so that no write to it can block.
    let mut reader = master.try_clone().unwrap();
    let drain = std::thread::spawn(move || {
        let mut seen = Vec::new();
        let mut buf = [0u8; 4096];
        while let Ok(n) = std::io::Read::read(&mut reader, &mut buf) {
            if n == 0 {
                break;
            }
            seen.extend_from_slice(&buf[..n]);
        }
        String::from_utf8_lossy(&seen).into_owned()
    });
    wait_for_file(&dir.path().join("ready"), &mut gpuspan);
    // Ctrl-C: the line discipline sends SIGINT to the terminal's foreground process group.
    master.write_all(&[0x03]).unwrap();
    let status = wait_with_timeout(&mut gpuspan, Duration::from_secs(30));
    let count = std::fs::read_to_string(dir.path().join("count")).unwrap();
    // Once every process holding the terminal has ended, reading it fails and the drain ends.
    let output = drain.join().unwrap();
    drop(master);
    assert_eq!(
        count, "1",
        "SIGINTs the command saw; terminal output: {output}"
    );
    assert_eq!(status.code(), Some(7), "the command's exit code; {output}");
}

#[test]
fn a_sigint_sent_to_gpuspan_alone_reaches_the_command_once() {
    let fake = FakeNvml::build();
    let dir = tempfile::tempdir().unwrap();
    let mut gpuspan = gpuspan_run(dir.path(), &fake)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_file(&dir.path().join("ready"), &mut gpuspan);
    support::signalled::send(gpuspan.id() as i32, libc::SIGINT);
    let status = wait_with_timeout(&mut gpuspan, Duration::from_secs(30));
    let count = std::fs::read_to_string(dir.path().join("count")).unwrap();
    assert_eq!(count, "1", "SIGINTs the command saw");
    assert_eq!(status.code(), Some(7), "the command's exit code");
}

//! Terminals for the tests of what a terminal does to the programs under it: a
//! pseudo-terminal (Ctrl-C and Ctrl-Z are typed at its master), a session whose controlling
//! terminal it is, a session with none, and a small job-control shell on it.

use std::ffi::CStr;
use std::fs::File;
use std::os::fd::FromRawFd;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::thread::JoinHandle;

/// Ctrl-C and Ctrl-Z, as typed at the terminal.
pub const CTRL_C: u8 = 0x03;
pub const CTRL_Z: u8 = 0x1a;

/// Counts the SIGINTs the process is sent, by the bytes Python's C-level handler writes to
/// the wakeup fd (one per delivered signal, so two in a row are never merged into one
/// Python handler call). It says it is ready by writing its pid to a file `ready`, waits
/// until one second after the first SIGINT, writes the count to `count`, and exits with 7.
pub const COUNTER: &str = r#"
import os, select, signal, sys, time
r, w = os.pipe()
os.set_blocking(w, False)
signal.set_wakeup_fd(w)
signal.signal(signal.SIGINT, lambda *_: None)
with open("ready.tmp", "w") as f:
    f.write(str(os.getpid()))
os.rename("ready.tmp", "ready")
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

/// A pseudo-terminal: the master (the terminal's side) and the slave's path.
pub struct Pty {
    pub master: File,
    pub slave: String,
}

impl Pty {
    pub fn open() -> Pty {
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
            Pty {
                master: File::from_raw_fd(master),
                slave,
            }
        }
    }

    /// Starts reading what the programs write to the terminal, so that no write to it
    /// blocks; the thread returns it all once every program holding the terminal has ended.
    pub fn drain(&self) -> JoinHandle<String> {
        let mut reader = self.master.try_clone().unwrap();
        std::thread::spawn(move || {
            let mut seen = Vec::new();
            let mut buf = [0u8; 4096];
            while let Ok(n) = std::io::Read::read(&mut reader, &mut buf) {
                if n == 0 {
                    break;
                }
                seen.extend_from_slice(&buf[..n]);
            }
            String::from_utf8_lossy(&seen).into_owned()
        })
    }

    /// Types `key` at the terminal.
    pub fn type_key(&self, key: u8) {
        std::io::Write::write_all(&mut &self.master, &[key]).unwrap();
    }

    /// Makes `command` the leader of a new session whose controlling terminal is this one,
    /// on its standard input, output and error, as a login shell's: it and what it starts
    /// in its group are the terminal's foreground process group.
    pub fn session_leader(&self, command: &mut Command) {
        let slave = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(&self.slave)
            .unwrap();
        command
            .stdin(Stdio::from(slave.try_clone().unwrap()))
            .stdout(Stdio::from(slave.try_clone().unwrap()))
            .stderr(Stdio::from(slave));
        // SAFETY: setsid and ioctl are async-signal-safe.
        unsafe {
            command.pre_exec(|| {
                if libc::setsid() < 0 || libc::ioctl(0, libc::TIOCSCTTY as _, 0) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
}

/// Makes `command` the leader of a new session with no controlling terminal, as a job
/// runner or a supervisor starts a program.
pub fn without_a_terminal(command: &mut Command) {
    with_default_signals(command);
    // SAFETY: setsid is async-signal-safe.
    unsafe {
        command.pre_exec(|| {
            if libc::setsid() < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// A shell with job control, as small as it can be: `python3 -c JOB_SHELL <dir> fg|bg
/// <program> <args>...`. It starts a session on the terminal at its standard input (the
/// test starts it with [`Pty::session_leader`]), ignores the signals an interactive shell
/// ignores, and starts the program as a job: a process group of its own, given the
/// terminal (`fg`) or not (`bg`). In `<dir>` it writes `job` (the job's pid, its group),
/// then one line in `events` for each stop of the job (`stopped <signal>`), after which it
/// takes the terminal back and waits for a file `fg` to appear in `<dir>` (removing it),
/// then gives the job the terminal and continues it (`continued`), as `fg` does; and when
/// the job ends, `exit <code>` or `signal <n>`, then `foreground <job|shell|other>`: whose
/// group held the terminal as the job ended.
pub const JOB_SHELL: &str = r#"
import os, signal, sys, time
d, mode, argv = sys.argv[1], sys.argv[2], sys.argv[3:]
for s in (signal.SIGINT, signal.SIGQUIT, signal.SIGTSTP, signal.SIGTTIN, signal.SIGTTOU):
    signal.signal(s, signal.SIG_IGN)
def event(line):
    with open(os.path.join(d, "events"), "a") as f:
        f.write(line + "\n")
pid = os.fork()
if pid == 0:
    os.setpgid(0, 0)
    if mode == "fg":
        os.tcsetpgrp(0, os.getpid())
    for s in (signal.SIGINT, signal.SIGQUIT, signal.SIGTSTP, signal.SIGTTIN, signal.SIGTTOU):
        signal.signal(s, signal.SIG_DFL)
    os.execvp(argv[0], argv)
try:
    os.setpgid(pid, pid)
except OSError:
    pass
if mode == "fg":
    os.tcsetpgrp(0, pid)
with open(os.path.join(d, "job.tmp"), "w") as f:
    f.write(str(pid))
os.rename(os.path.join(d, "job.tmp"), os.path.join(d, "job"))
deadline = time.monotonic() + 120
while True:
    _, status = os.waitpid(pid, os.WUNTRACED)
    if os.WIFSTOPPED(status):
        event("stopped %d" % os.WSTOPSIG(status))
        os.tcsetpgrp(0, os.getpgrp())
        go = os.path.join(d, "fg")
        while not os.path.exists(go) and time.monotonic() < deadline:
            time.sleep(0.01)
        os.remove(go)
        os.tcsetpgrp(0, pid)
        os.killpg(pid, signal.SIGCONT)
        event("continued")
        continue
    fg = os.tcgetpgrp(0)
    if os.WIFEXITED(status):
        event("exit %d" % os.WEXITSTATUS(status))
    else:
        event("signal %d" % os.WTERMSIG(status))
    event("foreground " + ("job" if fg == pid else "shell" if fg == os.getpgrp() else "other"))
    break
"#;

/// Starts `command` with SIGHUP, SIGINT, SIGQUIT and SIGTERM at their default action, as
/// from a terminal. A test run started in the background of a non-interactive shell has
/// SIGINT and SIGQUIT ignored (and under `nohup`, SIGHUP): a program keeps an ignored signal
/// ignored and hands that on to what it starts, where a shell's `trap` cannot undo it, so a
/// test of what a signal does would wait for ever.
pub fn with_default_signals(command: &mut Command) {
    // SAFETY: only `signal`, async-signal-safe, runs between fork and exec.
    unsafe {
        command.pre_exec(|| {
            for signal in [libc::SIGHUP, libc::SIGINT, libc::SIGQUIT, libc::SIGTERM] {
                libc::signal(signal, libc::SIG_DFL);
            }
            Ok(())
        });
    }
}

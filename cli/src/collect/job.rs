//! The command `gpuspan run` starts, as a job of its own, the way a shell with job control
//! starts one: in a process group of its own, which gets the terminal while it runs.
//!
//! A signal sent to gpuspan's process group (`kill -INT -<pgid>`, a supervisor's
//! `stopasgroup`) then reaches gpuspan alone, and gpuspan passes it on once; a Ctrl-C typed
//! at the terminal goes to the foreground group, the command's, and not to gpuspan.
//!
//! The terminal is handed over only when an interactive shell started gpuspan as a job of
//! its own in the foreground: gpuspan leads its process group and that group holds the
//! terminal. Started in the background, gpuspan leaves the terminal to the shell. Started in
//! a group it does not lead (by a script, which starts its commands in its own group, or
//! after `|`), it leaves the terminal to that group: a Ctrl-C reaches gpuspan there, and it
//! passes it on; several gpuspans started by one script never take the terminal from each
//! other. A command that reads the terminal while gpuspan's group holds it gets it then.
//!
//! A command stopped by a job-control signal (Ctrl-Z, or reading the terminal from the
//! background) has gpuspan take the terminal back and stop its own group with the same
//! signal, so the shell that started gpuspan sees its job stopped; when gpuspan is
//! continued (`fg`, `bg`) it gives the terminal back to the command where its group holds
//! it and continues the command. Without a terminal, a stopped command is left to whoever
//! stopped it.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, ExitStatus};
use std::time::Duration;

use libc::{c_int, pid_t};

use crate::signals::forward;

/// A command started as a job of its own.
pub(super) struct Job {
    pid: pid_t,
    terminal: Option<Terminal>,
    /// Whether gpuspan gave the terminal to the command's group and has not taken it back.
    handed: bool,
}

impl Job {
    /// Starts `command` in a process group of its own, giving it the terminal when
    /// gpuspan's group holds it.
    pub(super) fn start(command: &mut Command) -> io::Result<Job> {
        let terminal = Terminal::open();
        // SAFETY: plain queries.
        let leader = unsafe { libc::getpgrp() == libc::getpid() };
        let take = leader && terminal.as_ref().is_some_and(Terminal::ours);
        let tty = terminal.as_ref().map_or(-1, |t| t.0.as_raw_fd());
        // Blocked in this thread, so in the child until it runs the command: a signal sent
        // to gpuspan's group before the child has left it waits there, and is dropped (it
        // is gpuspan's, which passes it on).
        let blocked = Blocked::signals(&[
            libc::SIGHUP,
            libc::SIGINT,
            libc::SIGQUIT,
            libc::SIGTERM,
            libc::SIGTTOU,
        ]);
        let mask = blocked.previous;
        // SAFETY: the closure makes only async-signal-safe calls.
        unsafe { command.pre_exec(move || become_a_job(tty, take, &mask)) };
        let spawned = command.spawn();
        drop(blocked);
        match spawned {
            Ok(child) => Ok(Job {
                pid: child.id() as pid_t,
                terminal,
                handed: take,
            }),
            Err(e) => {
                // The child may have taken the terminal before its exec failed.
                if let Some(terminal) = terminal.as_ref().filter(|_| take) {
                    terminal.hand_to(our_group());
                }
                Err(e)
            }
        }
    }

    pub(super) fn pid(&self) -> u32 {
        self.pid as u32
    }

    /// Waits until the command has ended, passing its stops on to gpuspan's job. The
    /// command stays unreaped (its pid, and so its group's id, cannot be reused) until
    /// [`Job::reap`].
    pub(super) fn wait_for_end(&mut self) -> io::Result<()> {
        loop {
            let info = wait(self.pid, libc::WEXITED | libc::WSTOPPED | libc::WNOWAIT)?;
            if info.si_code != libc::CLD_STOPPED {
                return Ok(());
            }
            // Collects that report of the stop (not the end, should it have come since).
            wait(self.pid, libc::WSTOPPED | libc::WNOHANG)?;
            // SAFETY: a CLD_STOPPED report carries the stopping signal in si_status.
            let signal = unsafe { info.si_status() };
            self.stopped(signal);
        }
    }

    /// Takes the terminal back, if the command holds it, and collects the command's exit
    /// status.
    pub(super) fn reap(mut self) -> io::Result<ExitStatus> {
        self.take_back();
        let mut status: c_int = 0;
        loop {
            // SAFETY: waits for our own child; `status` is a valid out parameter.
            if unsafe { libc::waitpid(self.pid, &mut status, 0) } == self.pid {
                return Ok(ExitStatus::from_raw(status));
            }
            let error = io::Error::last_os_error();
            if error.kind() != io::ErrorKind::Interrupted {
                return Err(error);
            }
        }
    }

    /// Gives the terminal back to gpuspan's group, if the command's group holds it.
    pub(super) fn take_back(&mut self) {
        if std::mem::take(&mut self.handed) {
            if let Some(terminal) = &self.terminal {
                terminal.hand_to(our_group());
            }
        }
    }

    /// The command was stopped by `signal`. Only the job-control signals count: a
    /// SIGSTOP is someone's business with the command alone (a debugger, `kill -STOP`).
    fn stopped(&mut self, signal: c_int) {
        if self.terminal.is_none()
            || !matches!(signal, libc::SIGTSTP | libc::SIGTTIN | libc::SIGTTOU)
        {
            return;
        }
        let was_handed = self.handed;
        self.take_back();
        let Some(terminal) = &self.terminal else {
            return;
        };
        // SAFETY: a plain query.
        let in_own_group = unsafe { libc::getpgid(self.pid) } == self.pid;
        // A command that touched the terminal while gpuspan's group held it (gpuspan was
        // brought to the foreground after a start in the background) only needs it.
        let touched = signal != libc::SIGTSTP;
        if touched && !was_handed && in_own_group && terminal.ours() && terminal.hand_to(self.pid) {
            self.handed = true;
        } else {
            stop_our_job(signal);
            // Continued: by `fg` (the terminal is gpuspan's group's again) or by `bg`.
            self.handed = in_own_group && terminal.ours() && terminal.hand_to(self.pid);
            if touched && !self.handed {
                // Still in the background: the command would stop again at once. Where
                // gpuspan's own stop had no effect (an orphaned group, the signal ignored)
                // this keeps the round from spinning.
                std::thread::sleep(Duration::from_millis(100));
            }
        }
        // SAFETY: kill has no memory effects.
        unsafe {
            if libc::kill(-self.pid, libc::SIGCONT) != 0 {
                libc::kill(self.pid, libc::SIGCONT);
            }
        }
    }
}

/// In the child, between `fork` and `exec`: a process group of its own, the terminal when
/// gpuspan held it, the signals gpuspan caught back to their defaults, and the signal mask
/// gpuspan had. Async-signal-safe.
fn become_a_job(tty: RawFd, take: bool, mask: &libc::sigset_t) -> io::Result<()> {
    // SAFETY: every call is async-signal-safe; the sets are initialised before use.
    unsafe {
        if libc::setpgid(0, 0) != 0 {
            return Err(io::Error::last_os_error());
        }
        if take {
            // SIGTTOU is blocked: a group in the background may take the terminal.
            libc::tcsetpgrp(tty, libc::getpid());
        }
        // Pending now, such a signal was sent to gpuspan's group before this process left
        // it: gpuspan got it too and passes it on. Ignoring a pending signal drops it.
        let mut pending: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut pending);
        libc::sigpending(&mut pending);
        for signal in forward::SIGNALS {
            if libc::sigismember(&pending, signal) == 1 {
                let mut ignore: libc::sigaction = std::mem::zeroed();
                ignore.sa_sigaction = libc::SIG_IGN;
                libc::sigemptyset(&mut ignore.sa_mask);
                let mut was: libc::sigaction = std::mem::zeroed();
                libc::sigaction(signal, &ignore, &mut was);
                libc::sigaction(signal, &was, std::ptr::null_mut());
            }
        }
        forward::default_in_child();
        libc::pthread_sigmask(libc::SIG_SETMASK, mask, std::ptr::null_mut());
    }
    Ok(())
}

/// Stops gpuspan's process group with `signal`, as the kernel would have had the command
/// still been in it, and returns once gpuspan is continued.
fn stop_our_job(signal: c_int) {
    // SAFETY: kill, sigpending and pthread_kill have no memory effects; the set is
    // initialised before use.
    unsafe {
        libc::kill(0, signal);
        // Most often this thread took the signal on its way out of kill and has been
        // stopped and continued already. Still pending, it is waiting for another thread:
        // sent to this one too, it stops the process before pthread_kill returns, and the
        // SIGCONT that continues it discards the other.
        let mut pending: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut pending);
        if libc::sigpending(&mut pending) == 0 && libc::sigismember(&pending, signal) == 1 {
            libc::pthread_kill(libc::pthread_self(), signal);
        }
    }
}

fn our_group() -> pid_t {
    // SAFETY: getpgrp has no preconditions.
    unsafe { libc::getpgrp() }
}

/// `waitid` for `pid` with `options`, retried when a signal interrupts it.
fn wait(pid: pid_t, options: c_int) -> io::Result<libc::siginfo_t> {
    loop {
        // SAFETY: a zeroed siginfo_t is a valid out parameter.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: waits on our own child; `info` is valid for the call.
        if unsafe { libc::waitid(libc::P_PID, pid as libc::id_t, &mut info, options) } == 0 {
            return Ok(info);
        }
        let error = io::Error::last_os_error();
        if error.kind() != io::ErrorKind::Interrupted {
            return Err(error);
        }
    }
}

/// The process's controlling terminal.
struct Terminal(OwnedFd);

impl Terminal {
    /// The controlling terminal, or `None` when the process has none.
    fn open() -> Option<Terminal> {
        // SAFETY: a constant path; the descriptor returned is ours.
        let fd = unsafe {
            libc::open(
                c"/dev/tty".as_ptr(),
                libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC,
            )
        };
        // SAFETY: a descriptor just opened, owned by nothing else.
        (fd >= 0).then(|| Terminal(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// Whether gpuspan's process group is the terminal's foreground group.
    fn ours(&self) -> bool {
        // SAFETY: plain queries on a descriptor we own.
        unsafe { libc::tcgetpgrp(self.0.as_raw_fd()) == libc::getpgrp() }
    }

    /// Makes `pgid` the terminal's foreground group; whether that worked.
    fn hand_to(&self, pgid: pid_t) -> bool {
        // From the background, tcsetpgrp would stop gpuspan with SIGTTOU unless it is
        // blocked.
        let _blocked = Blocked::signals(&[libc::SIGTTOU]);
        // SAFETY: a descriptor we own.
        unsafe { libc::tcsetpgrp(self.0.as_raw_fd(), pgid) == 0 }
    }
}

/// Signals blocked in this thread until dropped.
struct Blocked {
    previous: libc::sigset_t,
}

impl Blocked {
    fn signals(signals: &[c_int]) -> Blocked {
        // SAFETY: the sets are initialised before use; pthread_sigmask changes this thread.
        unsafe {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            for &signal in signals {
                libc::sigaddset(&mut set, signal);
            }
            let mut previous: libc::sigset_t = std::mem::zeroed();
            libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut previous);
            Blocked { previous }
        }
    }
}

impl Drop for Blocked {
    fn drop(&mut self) {
        // SAFETY: restores the mask this thread had.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &self.previous, std::ptr::null_mut()) };
    }
}

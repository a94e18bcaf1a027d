//! Passing SIGHUP, SIGINT, SIGQUIT and SIGTERM on to commands gpuspan runs, for as long as
//! it runs them, and giving the signals back their dispositions afterwards.
//!
//! While a [`Catching`] is alive, gpuspan's handler takes these four signals in place of
//! whatever the process had (a signal the process ignores stays ignored); a thread passes
//! each one on to every registered [`Target`], a process group. When the last `Catching`
//! ends, each signal gets back the very `sigaction` it had, so a Ctrl-C after the command
//! has ended does what it did before: by default, it ends the process. A signal caught while
//! no target was registered (just before the command started, or just after it ended) is
//! raised again once the dispositions are back, so it is not lost.
//!
//! Several runs at once in one process share the handler and the thread: each signal goes
//! to every command running.
//!
//! The handler is async-signal-safe: it writes the signal's number to a non-blocking pipe.

use std::io::{self, Read};
use std::os::fd::IntoRawFd;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Mutex, OnceLock};
use std::thread::JoinHandle;

use libc::{c_int, pid_t};

/// The signals passed on. SIGHUP among them: a shell whose terminal closes hangs up its
/// jobs by signalling their process groups, and the command is in a group of its own.
pub(crate) const SIGNALS: [c_int; 4] = [libc::SIGHUP, libc::SIGINT, libc::SIGQUIT, libc::SIGTERM];

/// The byte that tells the thread to end (no signal is numbered 0).
const STOP: u8 = 0;

/// Write end of the pipe the forwarding thread reads. It lives as long as the process: a
/// handler may still be writing to it as the catching ends.
static WAKE: AtomicI32 = AtomicI32::new(-1);
/// Read end of that pipe.
static WAKES: OnceLock<UnixStream> = OnceLock::new();
/// The process that installed the handler: a child made by `fork` inherits the handler but
/// not the thread, so there the handler steps aside.
static OWNER: AtomicI32 = AtomicI32::new(0);
static STATE: Mutex<State> = Mutex::new(State::new());

/// What the catching shares, under one lock.
struct State {
    /// Live [`Catching`] values.
    users: usize,
    /// Each signal caught and the disposition it had before.
    previous: Vec<(c_int, Disposition)>,
    /// Process groups each signal goes to.
    targets: Vec<pid_t>,
    /// Signals caught while no target was registered.
    unclaimed: Vec<c_int>,
    thread: Option<JoinHandle<()>>,
}

impl State {
    const fn new() -> State {
        State {
            users: 0,
            previous: Vec::new(),
            targets: Vec::new(),
            unclaimed: Vec::new(),
            thread: None,
        }
    }
}

/// A `sigaction` as the kernel holds it.
#[derive(Clone, Copy)]
struct Disposition(libc::sigaction);

// SAFETY: a `sigaction` is plain data (a handler address, flags and a mask).
unsafe impl Send for Disposition {}

fn lock() -> std::sync::MutexGuard<'static, State> {
    STATE.lock().unwrap_or_else(|p| p.into_inner())
}

/// While alive, SIGHUP, SIGINT, SIGQUIT and SIGTERM are caught and passed on to the targets.
#[must_use = "the signals are given back when this is dropped"]
pub(crate) struct Catching {
    _private: (),
}

impl Catching {
    /// Starts catching (or joins the catching already under way).
    pub(crate) fn start() -> io::Result<Catching> {
        let mut state = lock();
        if state.users == 0 {
            install(&mut state)?;
        }
        state.users += 1;
        Ok(Catching { _private: () })
    }

    /// Passes every signal caught from now on (and those caught while no target was
    /// registered) to the process group `pgid`, until the returned value is dropped.
    pub(crate) fn forward_to(&self, pgid: pid_t) -> Target {
        let mut state = lock();
        state.targets.push(pgid);
        for signal in std::mem::take(&mut state.unclaimed) {
            pass_on(pgid, signal);
        }
        Target { pgid }
    }
}

impl Drop for Catching {
    fn drop(&mut self) {
        let thread = {
            let mut state = lock();
            state.users = state.users.saturating_sub(1);
            if state.users > 0 {
                return;
            }
            restore(&mut state);
            let thread = state.thread.take();
            if thread.is_some() {
                wake(STOP);
            }
            thread
        };
        // The thread reads every signal written before the stop byte, then ends.
        if let Some(thread) = thread {
            let _ = thread.join();
        }
        let unclaimed = std::mem::take(&mut lock().unclaimed);
        for signal in unclaimed {
            // SAFETY: kill has no memory effects; the signal now takes the course it had
            // before gpuspan caught it.
            unsafe { libc::kill(libc::getpid(), signal) };
        }
    }
}

/// A process group the caught signals go to, while alive.
pub(crate) struct Target {
    pgid: pid_t,
}

impl Drop for Target {
    fn drop(&mut self) {
        let mut state = lock();
        if let Some(index) = state.targets.iter().position(|&t| t == self.pgid) {
            state.targets.swap_remove(index);
        }
    }
}

/// Sends `signal` to the process group `pgid`, or to the process `pgid` when it has left
/// the group it led.
fn pass_on(pgid: pid_t, signal: c_int) {
    // SAFETY: kill has no memory effects.
    unsafe {
        if libc::kill(-pgid, signal) != 0 {
            libc::kill(pgid, signal);
        }
    }
}

fn install(state: &mut State) -> io::Result<()> {
    let mut wakes = pipe()?.try_clone()?;
    // Bytes a handler wrote as an earlier catching ended belong to no command.
    wakes.set_nonblocking(true)?;
    let mut stale = [0u8; 64];
    while matches!(wakes.read(&mut stale), Ok(n) if n > 0) {}
    wakes.set_nonblocking(false)?;
    let thread = std::thread::Builder::new()
        .name("gpuspan-forward".into())
        .spawn(move || {
            let mut byte = [0u8];
            while wakes.read_exact(&mut byte).is_ok() && byte[0] != STOP {
                let signal = c_int::from(byte[0]);
                let mut state = lock();
                if state.targets.is_empty() {
                    if !state.unclaimed.contains(&signal) {
                        state.unclaimed.push(signal);
                    }
                } else {
                    for &pgid in &state.targets {
                        pass_on(pgid, signal);
                    }
                }
            }
        })?;
    // SAFETY: getpid has no preconditions.
    OWNER.store(unsafe { libc::getpid() }, Ordering::SeqCst);
    state.previous.clear();
    let installed = SIGNALS
        .into_iter()
        .try_for_each(|signal| take_over(signal, &mut state.previous));
    if let Err(error) = installed {
        restore(state);
        wake(STOP);
        let _ = thread.join();
        return Err(error);
    }
    state.thread = Some(thread);
    Ok(())
}

/// Installs gpuspan's handler for `signal`, noting what it replaces, unless the signal is
/// ignored.
fn take_over(signal: c_int, previous: &mut Vec<(c_int, Disposition)>) -> io::Result<()> {
    let current = disposition_of(signal).ok_or_else(io::Error::last_os_error)?;
    if current.sa_sigaction == libc::SIG_IGN {
        return Ok(());
    }
    // SAFETY: an all-zero sigaction is a valid value to fill in.
    let mut ours: libc::sigaction = unsafe { std::mem::zeroed() };
    ours.sa_sigaction = handler_address();
    ours.sa_flags = libc::SA_RESTART;
    // SAFETY: the mask is a valid sigset_t; both pointers are valid for the call; the
    // handler only does async-signal-safe things.
    let installed = unsafe {
        libc::sigemptyset(&mut ours.sa_mask);
        libc::sigaction(signal, &ours, std::ptr::null_mut())
    };
    if installed != 0 {
        return Err(io::Error::last_os_error());
    }
    previous.push((signal, Disposition(current)));
    Ok(())
}

/// Gives each caught signal the disposition it had, unless someone installed a handler over
/// gpuspan's since (theirs stays).
fn restore(state: &mut State) {
    for (signal, Disposition(previous)) in state.previous.drain(..) {
        if ours(signal) {
            // SAFETY: `previous` is what the kernel gave us for this signal.
            unsafe { libc::sigaction(signal, &previous, std::ptr::null_mut()) };
        }
    }
}

/// In a child between `fork` and `exec`: gives the signals gpuspan's handler holds their
/// default action back. Async-signal-safe.
pub(crate) fn default_in_child() {
    for signal in SIGNALS {
        if ours(signal) {
            // SAFETY: a zeroed sigaction is valid; sigaction is async-signal-safe.
            unsafe {
                let mut default: libc::sigaction = std::mem::zeroed();
                default.sa_sigaction = libc::SIG_DFL;
                libc::sigemptyset(&mut default.sa_mask);
                libc::sigaction(signal, &default, std::ptr::null_mut());
            }
        }
    }
}

/// The pipe's read end, made (with its write end in [`WAKE`]) on first use.
fn pipe() -> io::Result<&'static UnixStream> {
    if let Some(wakes) = WAKES.get() {
        return Ok(wakes);
    }
    let (wakes, wake) = UnixStream::pair()?;
    wake.set_nonblocking(true)?;
    let wakes = WAKES.get_or_init(|| wakes);
    // Under the state's lock: one caller at a time gets here.
    WAKE.store(wake.into_raw_fd(), Ordering::SeqCst);
    Ok(wakes)
}

/// Writes one byte to the pipe. Async-signal-safe.
fn wake(byte: u8) {
    let fd = WAKE.load(Ordering::SeqCst);
    if fd >= 0 {
        // SAFETY: a one-byte write from a valid buffer; the pipe is non-blocking, so a full
        // pipe drops the byte, as the kernel merges a signal already pending.
        unsafe { libc::write(fd, (&byte as *const u8).cast(), 1) };
    }
}

/// What `signal` does now; `None` when the kernel refuses to say. Async-signal-safe.
fn disposition_of(signal: c_int) -> Option<libc::sigaction> {
    let mut now = std::mem::MaybeUninit::<libc::sigaction>::zeroed();
    // SAFETY: a null new action only reads, into a valid out parameter; on success the
    // kernel has filled it in.
    unsafe {
        (libc::sigaction(signal, std::ptr::null(), now.as_mut_ptr()) == 0)
            .then(|| now.assume_init())
    }
}

/// Whether gpuspan's handler is the one installed for `signal`. Async-signal-safe.
fn ours(signal: c_int) -> bool {
    disposition_of(signal).is_some_and(|now| now.sa_sigaction == handler_address())
}

fn handler_address() -> libc::sighandler_t {
    handler as extern "C" fn(c_int) as libc::sighandler_t
}

/// Hands the signal to the forwarding thread. In a child made by `fork` that has not run
/// another program yet, there is no such thread: the signal takes its default course.
extern "C" fn handler(signal: c_int) {
    let saved = errno::errno();
    // SAFETY: getpid, sigaction, raise and write are async-signal-safe; the byte is valid.
    unsafe {
        if libc::getpid() != OWNER.load(Ordering::SeqCst) {
            let mut default: libc::sigaction = std::mem::zeroed();
            default.sa_sigaction = libc::SIG_DFL;
            libc::sigemptyset(&mut default.sa_mask);
            libc::sigaction(signal, &default, std::ptr::null_mut());
            libc::raise(signal);
        } else {
            // The signals are numbered below 16.
            wake(signal as u8);
        }
    }
    errno::set_errno(saved);
}

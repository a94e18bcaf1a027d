//! The operating-system side: gpuspan's handler for SIGINT and SIGTERM, installed on top of
//! whatever the program had, chaining to it.
//!
//! Everything the handler itself does is async-signal-safe: it writes one byte to a pipe
//! (the flusher thread reads it), calls the previous handler, queries or sets a disposition
//! with `sigaction` and re-raises with `raise`. It allocates nothing and takes no lock.

use std::io;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::OnceLock;

use libc::{c_int, c_void, siginfo_t};

/// The signals gpuspan flushes on.
pub(super) const SIGNALS: [c_int; 2] = [libc::SIGINT, libc::SIGTERM];

/// The disposition a signal had when gpuspan installed its handler.
#[derive(Clone, Copy)]
struct Previous(libc::sigaction);

// SAFETY: a `sigaction` is plain data (a handler address, flags and a mask); it is written
// once before the handler that reads it is installed, and never changed after.
unsafe impl Sync for Previous {}
// SAFETY: as above.
unsafe impl Send for Previous {}

impl Previous {
    /// Whether the program had a handler function (not the default action, not ignored).
    fn is_handler(&self) -> bool {
        let action = self.0.sa_sigaction;
        action != libc::SIG_DFL && action != libc::SIG_IGN
    }
}

/// What was found when gpuspan installed its handler for one signal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Found {
    /// The default action: gpuspan restores it after flushing.
    Default,
    /// A handler of the program's: gpuspan calls it and leaves the decision to it.
    Handler,
    /// The program ignores the signal: gpuspan leaves it ignored and installs nothing.
    Ignored,
}

/// The previous disposition of SIGINT (index 0) and SIGTERM (index 1).
static PREVIOUS: [OnceLock<Previous>; 2] = [OnceLock::new(), OnceLock::new()];
/// Write end of the pipe the flusher thread waits on.
static WAKE_FD: AtomicI32 = AtomicI32::new(-1);
/// The process that installed the handler: a child made by `fork` inherits the handler but
/// not the flusher thread, so there the handler steps aside.
static OWNER: AtomicI32 = AtomicI32::new(0);
/// Set while the flusher exports after a signal: a second SIGINT whose default action
/// applies then ends the process at once (a second Ctrl-C does not wait); a second SIGTERM
/// leaves the flush to end in the default action.
pub(super) static FLUSHING: AtomicBool = AtomicBool::new(false);

fn slot(signal: c_int) -> Option<&'static OnceLock<Previous>> {
    SIGNALS
        .iter()
        .position(|&s| s == signal)
        .map(|index| &PREVIOUS[index])
}

/// Where the handler wakes the flusher; set before any handler is installed.
pub(super) fn set_wake_fd(fd: RawFd) {
    WAKE_FD.store(fd, Ordering::SeqCst);
}

/// Installs gpuspan's handler for `signal` on top of the current disposition. Installing
/// twice is harmless: the second call finds the first and changes nothing.
pub(super) fn install(signal: c_int) -> io::Result<Found> {
    let slot = slot(signal).ok_or_else(|| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: getpid has no preconditions.
    OWNER.store(unsafe { libc::getpid() }, Ordering::SeqCst);
    let current = query(signal)?;
    if current.sa_sigaction == handler_address() {
        return Ok(found(slot.get()));
    }
    if current.sa_sigaction == libc::SIG_IGN {
        return Ok(Found::Ignored);
    }
    let previous = *slot.get_or_init(|| Previous(current));
    // SAFETY: an all-zero sigaction is a valid value to fill in.
    let mut ours: libc::sigaction = unsafe { std::mem::zeroed() };
    ours.sa_sigaction = handler_address();
    if previous.is_handler() {
        // Keep what the program chose for its own handler: without SA_RESTART (Python's
        // choice) a blocking call returns EINTR so the program can react at once.
        ours.sa_mask = previous.0.sa_mask;
        ours.sa_flags = previous.0.sa_flags & libc::SA_RESTART;
    } else {
        // SAFETY: the mask is a valid sigset_t to initialise.
        unsafe { libc::sigemptyset(&mut ours.sa_mask) };
        ours.sa_flags = libc::SA_RESTART;
    }
    ours.sa_flags |= libc::SA_SIGINFO | libc::SA_ONSTACK;
    // SAFETY: both pointers are valid for the call; the handler only does
    // async-signal-safe things.
    if unsafe { libc::sigaction(signal, &ours, std::ptr::null_mut()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(found(Some(&previous)))
}

fn found(previous: Option<&Previous>) -> Found {
    match previous {
        Some(previous) if previous.is_handler() => Found::Handler,
        _ => Found::Default,
    }
}

/// Gives `signal` its default action back and raises it, unless nobody is left to take it:
/// only when the program had no handler of its own at install and none was installed over
/// gpuspan's since. Returns without ending the process when someone else handles it.
///
/// Called by the flusher thread once the flush is over; unblocks the signal there first.
pub(super) fn default_action_if_unhandled(signal: c_int) {
    let Some(previous) = slot(signal).and_then(OnceLock::get) else {
        return;
    };
    if previous.is_handler() {
        return;
    }
    // SAFETY: the set is initialised before use; pthread_sigmask only changes this thread.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, signal);
        libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
    }
    raise_default(signal);
}

/// Swaps in the default disposition and raises `signal`, but only if gpuspan's handler was
/// still the one installed; otherwise puts back what was there. Async-signal-safe.
fn raise_default(signal: c_int) {
    // SAFETY: zeroed sigactions are valid; all pointers are valid for the calls; every
    // function used is async-signal-safe.
    unsafe {
        let mut default: libc::sigaction = std::mem::zeroed();
        default.sa_sigaction = libc::SIG_DFL;
        libc::sigemptyset(&mut default.sa_mask);
        let mut was: libc::sigaction = std::mem::zeroed();
        if libc::sigaction(signal, &default, &mut was) != 0 {
            return;
        }
        if was.sa_sigaction != handler_address() {
            // Someone installed a handler over gpuspan's (and chains to it): theirs decides.
            libc::sigaction(signal, &was, std::ptr::null_mut());
            return;
        }
        libc::raise(signal);
    }
}

fn query(signal: c_int) -> io::Result<libc::sigaction> {
    // SAFETY: a zeroed sigaction is a valid out parameter; a null new action only reads.
    unsafe {
        let mut current: libc::sigaction = std::mem::zeroed();
        if libc::sigaction(signal, std::ptr::null(), &mut current) != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(current)
    }
}

fn handler_address() -> libc::sighandler_t {
    handler as extern "C" fn(c_int, *mut siginfo_t, *mut c_void) as libc::sighandler_t
}

/// The handler. Asks for the flush first (an atomic add and a write), then chains to the
/// previous handler, as signal-hook does: a program's handler that ends the process inside
/// the handler (`exit`, as some C libraries do) then finds the flush already asked for,
/// and the exit hook waits for it.
extern "C" fn handler(signal: c_int, info: *mut siginfo_t, context: *mut c_void) {
    let saved = errno::errno();
    if let Some(previous) = slot(signal).and_then(OnceLock::get) {
        // SAFETY: getpid is async-signal-safe.
        let forked = unsafe { libc::getpid() } != OWNER.load(Ordering::SeqCst);
        // Marked here, not when the flusher thread gets to run: a second Ctrl-C that comes
        // before a busy machine schedules that thread is still a second one.
        let flushing = if forked {
            FLUSHING.load(Ordering::SeqCst)
        } else {
            FLUSHING.swap(true, Ordering::SeqCst)
        };
        if !forked && !flushing {
            wake(signal);
        }
        if previous.is_handler() {
            // SAFETY: the address was a handler installed with these flags; it is called
            // the way the kernel would have called it.
            unsafe { call(previous, signal, info, context) };
        } else if forked || (flushing && signal == libc::SIGINT) {
            // A forked child has no flusher, and a second Ctrl-C during the flush should
            // not wait for it: act as if gpuspan were not there. The raised signal stays
            // blocked until this handler returns, then takes its default course. A second
            // SIGTERM is left to the flush under way, which ends in the default action.
            raise_default(signal);
        }
    }
    errno::set_errno(saved);
}

/// Calls a handler saved from `sigaction` with the signature its flags promise.
///
/// # Safety
/// `previous` must hold a handler function (not `SIG_DFL` or `SIG_IGN`).
unsafe fn call(previous: &Previous, signal: c_int, info: *mut siginfo_t, context: *mut c_void) {
    let address = previous.0.sa_sigaction as *const ();
    if previous.0.sa_flags & libc::SA_SIGINFO != 0 {
        // SAFETY: SA_SIGINFO handlers take (signal, info, context).
        let action = unsafe {
            std::mem::transmute::<*const (), extern "C" fn(c_int, *mut siginfo_t, *mut c_void)>(
                address,
            )
        };
        action(signal, info, context);
    } else {
        // SAFETY: plain handlers take the signal only.
        let action = unsafe { std::mem::transmute::<*const (), extern "C" fn(c_int)>(address) };
        action(signal);
    }
}

fn wake(signal: c_int) {
    let fd = WAKE_FD.load(Ordering::SeqCst);
    if fd >= 0 {
        // Counted before the byte is written, so the flush it wakes covers it.
        super::bounded::requested();
        let byte = signal as u8;
        // SAFETY: write is async-signal-safe; the pipe is non-blocking, so a full pipe
        // (a flush already pending) drops the byte instead of blocking the handler.
        unsafe { libc::write(fd, (&byte as *const u8).cast(), 1) };
    }
}

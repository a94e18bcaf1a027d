//! A training loop that saves a checkpoint when SIGTERM comes (SLURM preemption, Kubernetes
//! eviction), while gpuspan exports the spans completed so far on the same signal.
//!
//! `--handler` picks how the program catches SIGTERM, each a way real programs do it:
//!
//! - `none`: it does not; SIGTERM ends the process after gpuspan's flush.
//! - `sigaction-before`: a `sigaction` handler installed before `gpuspan::init()`.
//! - `signal-hook-before` / `signal-hook-after`: `signal_hook::flag::register`, before or
//!   after `gpuspan::init()`.
//! - `sigaction-after`: a `sigaction` handler installed after `gpuspan::init()` that keeps
//!   the previous handler and calls it, as well-behaved frameworks do.
//! - `exit-in-handler`: a `sigaction` handler installed before `gpuspan::init()` that calls
//!   `exit(3)` inside the handler, as some C libraries do.
//!
//! With a handler, the program writes the checkpoint file and exits at once with status 3,
//! without shutting gpuspan down: the signal's flush has the spans exported by then.
//! `--return-from-main` makes it return from `main` with status 3 instead, so gpuspan shuts
//! down (on drop) while the signal's flush may still run.
//! `--fork-worker` forks a worker process that only waits, as data loaders fork theirs.
//!
//! ```text
//! cargo run --example checkpoint_on_sigterm -- --handler signal-hook-after --checkpoint ckpt.txt
//! ```

use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

/// Exit status after a checkpoint was saved on SIGTERM.
const CHECKPOINTED: i32 = 3;

const USAGE: &str = "usage: checkpoint_on_sigterm --checkpoint PATH [--handler none|\
sigaction-before|sigaction-after|signal-hook-before|signal-hook-after|exit-in-handler] \
[--return-from-main] [--fork-worker]";

/// Set by the program's own `sigaction` handler.
static TERMINATE: AtomicBool = AtomicBool::new(false);

#[derive(Clone, Copy, PartialEq)]
enum Handler {
    None,
    SigactionBefore,
    SigactionAfter,
    SignalHookBefore,
    SignalHookAfter,
    ExitInside,
}

struct Args {
    checkpoint: String,
    handler: Handler,
    return_from_main: bool,
    fork_worker: bool,
}

fn parse_args() -> Result<Args, String> {
    let mut checkpoint = None;
    let mut handler = Handler::None;
    let mut fork_worker = false;
    let mut return_from_main = false;
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        match flag.as_str() {
            "--checkpoint" => checkpoint = it.next(),
            "--handler" => {
                handler = match it.next().as_deref() {
                    Some("none") => Handler::None,
                    Some("sigaction-before") => Handler::SigactionBefore,
                    Some("sigaction-after") => Handler::SigactionAfter,
                    Some("signal-hook-before") => Handler::SignalHookBefore,
                    Some("signal-hook-after") => Handler::SignalHookAfter,
                    Some("exit-in-handler") => Handler::ExitInside,
                    other => return Err(format!("--handler {other:?}: unknown\n{USAGE}")),
                }
            }
            "--fork-worker" => fork_worker = true,
            "--return-from-main" => return_from_main = true,
            _ => return Err(format!("unknown option {flag}\n{USAGE}")),
        }
    }
    let checkpoint = checkpoint.ok_or_else(|| format!("--checkpoint is required\n{USAGE}"))?;
    Ok(Args {
        checkpoint,
        handler,
        return_from_main,
        fork_worker,
    })
}

/// The handler a C library or framework would install: it only sets a flag.
extern "C" fn on_sigterm(_: libc::c_int) {
    TERMINATE.store(true, Ordering::SeqCst);
}

/// The handler some C libraries install: it ends the process from inside the handler.
extern "C" fn exit_on_sigterm(_: libc::c_int) {
    // SAFETY: exit is what such a library calls; it runs the exit hooks on this thread.
    unsafe { libc::exit(CHECKPOINTED) };
}

/// The handler that was there before `install_sigaction` (for the chaining variant).
struct Previous(libc::sigaction);
// SAFETY: plain data, written once before the handler that reads it is installed.
unsafe impl Sync for Previous {}
// SAFETY: as above.
unsafe impl Send for Previous {}
static PREVIOUS: OnceLock<Previous> = OnceLock::new();

/// Sets the flag, then calls the handler it replaced.
extern "C" fn on_sigterm_chained(
    signal: libc::c_int,
    info: *mut libc::siginfo_t,
    ctx: *mut libc::c_void,
) {
    TERMINATE.store(true, Ordering::SeqCst);
    if let Some(Previous(previous)) = PREVIOUS.get() {
        let address = previous.sa_sigaction;
        if address == libc::SIG_DFL || address == libc::SIG_IGN {
            return;
        }
        let address = address as *const ();
        // SAFETY: the saved handler is called the way the kernel would call it.
        unsafe {
            if previous.sa_flags & libc::SA_SIGINFO != 0 {
                let f = std::mem::transmute::<
                    *const (),
                    extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void),
                >(address);
                f(signal, info, ctx);
            } else {
                std::mem::transmute::<*const (), extern "C" fn(libc::c_int)>(address)(signal);
            }
        }
    }
}

fn install_sigaction(handler: Handler) -> std::io::Result<()> {
    // SAFETY: zeroed sigactions are valid; the handlers only touch atomics and call the
    // previous handler.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        libc::sigemptyset(&mut action.sa_mask);
        action.sa_flags = libc::SA_RESTART;
        match handler {
            Handler::SigactionAfter => {
                action.sa_sigaction = on_sigterm_chained as *const () as usize;
                action.sa_flags |= libc::SA_SIGINFO;
            }
            Handler::ExitInside => action.sa_sigaction = exit_on_sigterm as *const () as usize,
            _ => action.sa_sigaction = on_sigterm as *const () as usize,
        }
        let mut previous: libc::sigaction = std::mem::zeroed();
        if libc::sigaction(libc::SIGTERM, std::ptr::null(), &mut previous) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let _ = PREVIOUS.set(Previous(previous));
        if libc::sigaction(libc::SIGTERM, &action, std::ptr::null_mut()) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

fn install(handler: Handler, before_init: bool, flag: &Arc<AtomicBool>) -> std::io::Result<()> {
    match (handler, before_init) {
        (Handler::SigactionBefore | Handler::ExitInside, true) => install_sigaction(handler),
        (Handler::SigactionAfter, false) => install_sigaction(handler),
        (Handler::SignalHookBefore, true) | (Handler::SignalHookAfter, false) => {
            signal_hook::flag::register(signal_hook::consts::SIGTERM, Arc::clone(flag))?;
            Ok(())
        }
        _ => Ok(()),
    }
}

/// Forks a worker that waits for signals, as a data loader's worker would.
fn fork_worker() -> libc::pid_t {
    // SAFETY: the child only calls pause, which is async-signal-safe.
    match unsafe { libc::fork() } {
        0 => loop {
            // SAFETY: pause has no preconditions.
            unsafe { libc::pause() };
        },
        pid => pid,
    }
}

/// Reports once the worker ended, and how.
fn reap(worker: &mut Option<libc::pid_t>) {
    let Some(pid) = *worker else { return };
    let mut status = 0;
    // SAFETY: status is a valid out parameter.
    if unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) } == pid {
        if libc::WIFSIGNALED(status) {
            println!("worker ended by signal {}", libc::WTERMSIG(status));
        } else {
            println!("worker exited with {}", libc::WEXITSTATUS(status));
        }
        *worker = None;
    }
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(args) => args,
        Err(message) => {
            eprintln!("{message}");
            return ExitCode::from(2);
        }
    };
    // Set by a signal-hook handler.
    let flag = Arc::new(AtomicBool::new(false));
    if let Err(e) = install(args.handler, true, &flag) {
        eprintln!("checkpoint_on_sigterm: installing the SIGTERM handler: {e}");
        return ExitCode::FAILURE;
    }
    let telemetry = match gpuspan::init() {
        Ok(telemetry) => telemetry,
        Err(error) => {
            eprintln!("checkpoint_on_sigterm: {error}");
            return ExitCode::FAILURE;
        }
    };
    if let Err(e) = install(args.handler, false, &flag) {
        eprintln!("checkpoint_on_sigterm: installing the SIGTERM handler: {e}");
        return ExitCode::FAILURE;
    }
    let mut worker = args.fork_worker.then(fork_worker);
    if let Some(pid) = worker {
        println!("worker {pid}");
    }

    for epoch in 0..10_000 {
        let epoch_span = gpuspan::epoch_span!(epoch);
        for step in 0..5 {
            let _s = gpuspan::step_span!(step);
            std::thread::sleep(Duration::from_millis(10));
            reap(&mut worker);
            if TERMINATE.load(Ordering::SeqCst) || flag.load(Ordering::SeqCst) {
                // What a preempted job does: save, then leave at once with its own status.
                let saved = format!("epoch {epoch} step {step}\n");
                if let Err(e) = std::fs::write(&args.checkpoint, saved) {
                    eprintln!("checkpoint_on_sigterm: {}: {e}", args.checkpoint);
                    return ExitCode::FAILURE;
                }
                println!("checkpoint saved");
                if args.return_from_main {
                    // The open spans end, then gpuspan shuts down as `telemetry` drops.
                    return ExitCode::from(CHECKPOINTED as u8);
                }
                std::process::exit(CHECKPOINTED);
            }
        }
        drop(epoch_span);
        println!("epoch {epoch} done");
    }
    drop(telemetry);
    ExitCode::SUCCESS
}

//! What makes a thread one of gpuspan's own background threads (export, endpoint, near-OOM
//! files, sampler): it feeds no subscriber, and it yields the cores to the training thread.

/// How much nicer than the program gpuspan's export threads run.
const BACKGROUND_NICE: libc::c_int = 10;

/// Lowers this thread's scheduling priority (Linux `nice`, per thread), so that when the
/// cores are busy the training thread gets them first and the export threads take what is
/// left. The sampler is not lowered: its schedule is what catches short spikes. Failing
/// (an unusual scheduler, a sandbox) leaves the priority as it was.
pub(crate) fn background_priority() {
    nicer_by(BACKGROUND_NICE);
}

/// Gives this thread the lowest ordinary priority (`nice` 19), for work that may take a
/// while and must not compete with the sampler on a busy machine (the near-OOM files).
pub(crate) fn lowest_priority() {
    nicer_by(19);
}

fn nicer_by(amount: libc::c_int) {
    #[cfg(not(target_os = "linux"))]
    let _ = amount;
    #[cfg(target_os = "linux")]
    // SAFETY: plain system calls on this thread's own id, with no pointers.
    unsafe {
        let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
        *libc::__errno_location() = 0;
        let current = libc::getpriority(libc::PRIO_PROCESS, tid);
        if current == -1 && *libc::__errno_location() != 0 {
            return;
        }
        let nicer = (current + amount).min(19);
        libc::setpriority(libc::PRIO_PROCESS, tid, nicer);
    }
}

/// Makes this thread's tracing go nowhere, for the life of the thread: gpuspan's own
/// threads (sampler, export, endpoint) must not feed the program's subscriber, whose spans
/// gpuspan exports.
pub(crate) fn silence_tracing() {
    std::mem::forget(tracing::dispatcher::set_default(&tracing::Dispatch::none()));
}

/// Waits for one of gpuspan's threads until `deadline`: a thread stuck in a file system that
/// stopped answering (a stale network mount) must not hang the program's exit. Returns
/// whether the thread finished; one that did not is left to finish, or to end with the
/// process.
pub(crate) fn join_by(thread: std::thread::JoinHandle<()>, deadline: std::time::Instant) -> bool {
    while !thread.is_finished() {
        let now = std::time::Instant::now();
        if now >= deadline {
            return false;
        }
        std::thread::sleep((deadline - now).min(std::time::Duration::from_millis(2)));
    }
    let _ = thread.join();
    true
}

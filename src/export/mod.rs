//! Getting spans and metric points out of the process without slowing the training thread:
//! a bounded queue drained by its own thread (for the SDK's spans and the collector's
//! forwarded requests alike), OTLP exporters driven by a private tokio
//! runtime, the run directory's OTLP/JSON files, and a count of everything that was lost.

pub(crate) mod health;
pub(crate) mod jsonl;
pub(crate) mod metrics;
pub(crate) mod otlp;
#[cfg(feature = "prometheus")]
pub(crate) mod prometheus;
pub(crate) mod queue;
mod returns;
pub(crate) mod sink;
pub(crate) mod spans;
pub(crate) mod tap;

use std::future::Future;

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

/// Runs an export future to completion on the calling thread, inside the export runtime's
/// context when there is one (tonic and reqwest need it). A thread that is itself inside a
/// tokio runtime cannot block, so the future then runs on a short-lived helper thread.
pub(crate) fn block_on<F>(runtime: Option<&tokio::runtime::Handle>, future: F) -> F::Output
where
    F: Future + Send,
    F::Output: Send,
{
    // With no subscriber: the transport's own tracing spans (h2, tonic, hyper) are not the
    // program's, and must not be exported as if they were.
    let run = move || {
        tracing::dispatcher::with_default(&tracing::Dispatch::none(), || match runtime {
            Some(handle) => handle.block_on(future),
            None => futures_block_on(future),
        })
    };
    if tokio::runtime::Handle::try_current().is_ok() {
        std::thread::scope(|scope| match scope.spawn(run).join() {
            Ok(output) => output,
            Err(panic) => std::panic::resume_unwind(panic),
        })
    } else {
        run()
    }
}

/// A minimal executor for futures that need no runtime (the file exporters).
fn futures_block_on<F: Future>(future: F) -> F::Output {
    use std::sync::Arc;
    use std::task::{Context, Poll, Wake, Waker};

    struct ThreadWaker(std::thread::Thread);
    impl Wake for ThreadWaker {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(ThreadWaker(std::thread::current())));
    let mut context = Context::from_waker(&waker);
    let mut future = std::pin::pin!(future);
    loop {
        match future.as_mut().poll(&mut context) {
            Poll::Ready(output) => return output,
            Poll::Pending => std::thread::park(),
        }
    }
}

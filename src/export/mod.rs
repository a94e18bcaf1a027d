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
#[cfg(test)]
pub(crate) mod testing;
pub(crate) mod transport_note;

use std::future::Future;

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

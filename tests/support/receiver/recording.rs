//! What the server thread records and the test reads: every request in arrival order.

use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;

use super::{RequestHeaders, Signal};

/// Everything received, in arrival order.
#[derive(Default)]
pub(super) struct Recorded {
    pub(super) traces: Vec<ExportTraceServiceRequest>,
    pub(super) metrics: Vec<ExportMetricsServiceRequest>,
    pub(super) headers: Vec<RequestHeaders>,
}

/// What the server thread and the test share; `changed` is notified after
/// every recorded request so the `wait_for_*` methods need not spin.
#[derive(Default)]
pub(super) struct Shared {
    pub(super) recorded: Mutex<Recorded>,
    pub(super) changed: Condvar,
    /// While set, every request is refused as a collector that is down would be
    /// (HTTP 503, gRPC UNAVAILABLE), and nothing is recorded.
    pub(super) failing: std::sync::atomic::AtomicBool,
    /// Milliseconds to hold each request before answering.
    pub(super) stall_ms: std::sync::atomic::AtomicU64,
    /// Requests that arrived, refused ones included, per [`Signal`] (traces first).
    pub(super) attempts: [std::sync::atomic::AtomicU64; 2],
}

impl Shared {
    /// Counts the attempt, waits the stall, and says whether to refuse it.
    pub(super) async fn admit(&self, signal: Signal) -> bool {
        use std::sync::atomic::Ordering;
        self.attempts[signal as usize].fetch_add(1, Ordering::SeqCst);
        let stall = self.stall_ms.load(Ordering::SeqCst);
        if stall > 0 {
            tokio::time::sleep(Duration::from_millis(stall)).await;
        }
        !self.failing.load(Ordering::SeqCst)
    }
}

impl Shared {
    pub(super) fn lock(&self) -> MutexGuard<'_, Recorded> {
        // A test that panicked while holding the lock leaves valid data.
        self.recorded.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn record_traces(
        &self,
        headers: RequestHeaders,
        request: ExportTraceServiceRequest,
    ) {
        let mut recorded = self.lock();
        recorded.headers.push(headers);
        recorded.traces.push(request);
        self.changed.notify_all();
    }

    pub(super) fn record_metrics(
        &self,
        headers: RequestHeaders,
        request: ExportMetricsServiceRequest,
    ) {
        let mut recorded = self.lock();
        recorded.headers.push(headers);
        recorded.metrics.push(request);
        self.changed.notify_all();
    }

    /// Blocks until `done(&recorded)` or until `timeout` passes, and returns
    /// the lock either way.
    pub(super) fn wait_until(
        &self,
        timeout: Duration,
        done: impl Fn(&Recorded) -> bool,
    ) -> MutexGuard<'_, Recorded> {
        let deadline = Instant::now() + timeout;
        let mut recorded = self.lock();
        while !done(&recorded) {
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            recorded = self
                .changed
                .wait_timeout(recorded, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        recorded
    }
}

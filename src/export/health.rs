//! Exact accounting of one signal's export: every item produced ends up delivered or lost,
//! and the reason of the last loss is kept for the shutdown report.
//!
//! Counting happens wherever an item's fate is decided (a full queue on the training thread,
//! an export on the export thread); announcing the first loss happens only on export
//! threads, through [`ExportHealth::warn_once`], so the training thread never writes.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::transport_note::TransportNote;

/// Counts of one signal's exporter.
#[derive(Debug)]
pub struct ExportHealth {
    /// Where the signal goes, for messages (`http://collector:4318/v1/traces`).
    pub(crate) destination: String,
    /// What one item is (`span`, `metric point`).
    item: &'static str,
    produced: AtomicU64,
    delivered: AtomicU64,
    lost: AtomicU64,
    last_error: Mutex<Option<String>>,
    warned: AtomicBool,
    /// The last attempt failed and none has succeeded since.
    failing: AtomicBool,
    /// How an OTLP endpoint's failures are told in full (a TLS failure named as one).
    note: Option<Arc<TransportNote>>,
}

/// What [`ExportTally::spans`] counts.
const SPAN: &str = "span";

/// How a queue that stops loses items.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Loss {
    /// Pushed after the queue was shut down.
    AfterShutdown,
    /// Pushed while the shutdown was being answered.
    DuringShutdown,
    /// The queue's thread is gone.
    Stopped,
    /// Still waiting when the shutdown's deadline passed.
    ShutdownTimeout,
}

/// A snapshot of the counts: `delivered + lost + pending == produced`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ExportCounts {
    /// Items handed to the exporter.
    pub produced: u64,
    /// Items the destination accepted.
    pub delivered: u64,
    /// Items given up on (queue overflow, shutdown before the destination came back).
    pub lost: u64,
}

impl ExportCounts {
    /// Items still waiting to be delivered.
    pub fn pending(&self) -> u64 {
        self.produced.saturating_sub(self.delivered + self.lost)
    }
}

/// The export counts of one [`Telemetry`](crate::Telemetry), summed over its exporters: a
/// handle that stays readable after [`Telemetry::shutdown`](crate::Telemetry::shutdown),
/// when the counts are final (nothing pending).
#[derive(Debug, Clone, Default)]
pub struct ExportTally {
    health: Arc<[Arc<ExportHealth>]>,
}

impl ExportTally {
    pub(crate) fn new(health: &[Arc<ExportHealth>]) -> Self {
        Self {
            health: health.into(),
        }
    }

    /// Spans produced, delivered and lost.
    pub fn spans(&self) -> ExportCounts {
        self.of(SPAN)
    }

    /// Metric data points produced, delivered and lost.
    pub fn points(&self) -> ExportCounts {
        self.of("metric point")
    }

    fn of(&self, item: &str) -> ExportCounts {
        self.health
            .iter()
            .filter(|h| h.item() == item)
            .map(|h| h.counts())
            .fold(ExportCounts::default(), |a, b| ExportCounts {
                produced: a.produced + b.produced,
                delivered: a.delivered + b.delivered,
                lost: a.lost + b.lost,
            })
    }
}

impl ExportHealth {
    /// Counts for a queue sending to `destination` (for people), counting items called `item`.
    pub fn new(destination: String, item: &'static str) -> Self {
        Self {
            destination,
            item,
            produced: AtomicU64::new(0),
            delivered: AtomicU64::new(0),
            lost: AtomicU64::new(0),
            last_error: Mutex::new(None),
            warned: AtomicBool::new(false),
            failing: AtomicBool::new(false),
            note: None,
        }
    }

    /// As [`new`](Self::new), for an OTLP endpoint whose failures `note` tells in full.
    pub(crate) fn with_note(mut self, note: Arc<TransportNote>) -> Self {
        self.note = Some(note);
        self
    }

    /// How this endpoint's failures are told, where it is OTLP.
    #[cfg_attr(
        not(any(feature = "otlp-grpc", feature = "otlp-http")),
        allow(dead_code)
    )]
    pub(crate) fn note(&self) -> Option<&Arc<TransportNote>> {
        self.note.as_ref()
    }

    pub(crate) fn produced(&self, count: u64) {
        self.produced.fetch_add(count, Ordering::Relaxed);
    }

    pub(crate) fn delivered(&self, count: u64) {
        self.delivered.fetch_add(count, Ordering::Relaxed);
        self.failing.store(false, Ordering::Relaxed);
    }

    /// Counts `count` items lost for `reason`. Never writes anything.
    pub(crate) fn lost(&self, count: u64, reason: &str) {
        if count == 0 {
            return;
        }
        self.lost.fetch_add(count, Ordering::Relaxed);
        self.remember(reason);
    }

    /// Counts `count` items still waiting when shutdown's deadline passed. Where attempts
    /// were failing, the last one's reason stays in the words (a refused TLS handshake
    /// retried until then is told as one, not only as time running out).
    pub(crate) fn lost_at_shutdown(&self, count: u64) {
        let timeout = self.reason(Loss::ShutdownTimeout);
        let last = match self.failing.load(Ordering::Relaxed) {
            true => self.last_error(),
            false => None,
        };
        match last {
            Some(last) if count > 0 && !last.starts_with(timeout) => {
                self.lost.fetch_add(count, Ordering::Relaxed);
                // Already told in full: kept as it is, not explained again.
                if let Ok(mut kept) = self.last_error.lock() {
                    *kept = Some(format!("{timeout}; the last attempt: {last}"));
                }
            }
            _ => self.lost(count, timeout),
        }
    }

    /// Keeps the reason of a failed attempt (the items may still be retried).
    pub(crate) fn failed(&self, reason: &str) {
        self.failing.store(true, Ordering::Relaxed);
        self.remember(reason);
    }

    /// Why items are given up when the queue is full: the destination is down, or it is
    /// up and takes them slower than they come.
    pub(crate) fn overflow_reason(&self) -> &'static str {
        if self.failing.load(Ordering::Relaxed) {
            "the destination was unreachable for longer than the export queue holds"
        } else if self.item == SPAN {
            "the spans came faster than the destination took them, for longer than the \
             export queue holds"
        } else {
            "they came faster than the destination took them, for longer than the export \
             queue holds"
        }
    }

    /// Why items are lost to the queue stopping, in words that name the item.
    pub(crate) fn reason(&self, loss: Loss) -> &'static str {
        let span = self.item == SPAN;
        match loss {
            Loss::AfterShutdown if span => "the span ended after shutdown",
            Loss::AfterShutdown => "it arrived after shutdown",
            Loss::DuringShutdown if span => "the span ended during shutdown",
            Loss::DuringShutdown => "it arrived during shutdown",
            Loss::Stopped => "the export thread has stopped",
            Loss::ShutdownTimeout => {
                "the destination did not accept them before the shutdown timeout"
            }
        }
    }

    fn remember(&self, reason: &str) {
        let explained = self.note.as_ref().and_then(|note| note.explain(reason));
        let reason = explained.as_deref().unwrap_or(reason);
        if let Ok(mut last) = self.last_error.lock() {
            // The same reason again (every span of an overflow) allocates nothing.
            if last.as_deref() != Some(reason) {
                *last = Some(reason.to_owned());
            }
        }
    }

    /// Announces the first loss, once, on stderr. Call from export threads only.
    pub(crate) fn warn_once(&self) {
        let lost = self.lost.load(Ordering::Relaxed);
        if lost > 0 && !self.warned.swap(true, Ordering::Relaxed) {
            eprintln!(
                "gpuspan: warning: could not export {lost} {}(s) to {}: {}; training goes on, \
                 and the total lost is reported at shutdown",
                self.item,
                self.destination,
                self.last_error().unwrap_or_else(|| "unknown".into())
            );
        }
    }

    pub(crate) fn item(&self) -> &'static str {
        self.item
    }

    /// What was produced, delivered and lost so far.
    pub fn counts(&self) -> ExportCounts {
        ExportCounts {
            produced: self.produced.load(Ordering::Relaxed),
            delivered: self.delivered.load(Ordering::Relaxed),
            lost: self.lost.load(Ordering::Relaxed),
        }
    }

    pub(crate) fn dropped(&self) -> u64 {
        self.lost.load(Ordering::Relaxed)
    }

    pub(crate) fn last_error(&self) -> Option<String> {
        self.last_error.lock().ok().and_then(|last| last.clone())
    }
}

//! What an exporter lost: counted on the export threads, reported once at shutdown.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

/// Losses of one signal's exporter.
#[derive(Debug)]
pub(crate) struct ExportHealth {
    /// Where the signal goes, for messages (`http://collector:4318/v1/traces`).
    pub(crate) destination: String,
    /// What one item is (`span`, `metric point`).
    item: &'static str,
    dropped: AtomicU64,
    last_error: Mutex<Option<String>>,
    warned: AtomicBool,
}

impl ExportHealth {
    pub(crate) fn new(destination: String, item: &'static str) -> Self {
        Self {
            destination,
            item,
            dropped: AtomicU64::new(0),
            last_error: Mutex::new(None),
            warned: AtomicBool::new(false),
        }
    }

    /// Counts `count` items lost for `reason`; the first loss is announced once on stderr.
    pub(crate) fn lost(&self, count: u64, reason: &str) {
        if count == 0 {
            return;
        }
        self.dropped.fetch_add(count, Ordering::Relaxed);
        if let Ok(mut last) = self.last_error.lock() {
            *last = Some(reason.to_owned());
        }
        if !self.warned.swap(true, Ordering::Relaxed) {
            eprintln!(
                "gpuspan: warning: could not export {count} {}(s) to {}: {reason}; \
                 training goes on, and the total lost is reported at shutdown",
                self.item, self.destination
            );
        }
    }

    pub(crate) fn item(&self) -> &'static str {
        self.item
    }

    pub(crate) fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    pub(crate) fn last_error(&self) -> Option<String> {
        self.last_error.lock().ok().and_then(|last| last.clone())
    }
}

//! The list of open spans' watermarks, and closed ones kept for reuse.

use std::sync::Arc;

use crate::figures::Watermark;

/// Open spans' watermarks, and closed ones kept for reuse so that opening a span does not
/// allocate. A span's watermark leaves `open` when the span ends (`Shared::finish_watermark`),
/// under the lock the sampler raises `open` under, and comes back to `free` once its figures
/// are read: at once, or, when it holds power figures, once the export thread has read them.
#[derive(Debug, Default)]
pub(super) struct Watermarks {
    pub(super) open: Vec<Arc<Watermark>>,
    pub(super) free: Vec<Arc<Watermark>>,
}

/// Most watermarks kept for reuse: as many as spans wait for the export thread at once in
/// a busy loop (the export queue's batches), so that a step span does not allocate one
/// while the export thread holds those of the steps before it. About 0.5 KiB each with 8
/// devices; the list only grows as far as the spans in flight have needed.
pub(super) const FREE_WATERMARKS: usize = 4096;

//! A span's watermark: its figures at the start and the highest seen while it is open,
//! raised by the sampler at every tick; and the list of open ones.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::figures::{AtomicReading, Reading};

/// Open spans' watermarks, and closed ones kept for reuse so that opening a span does not
/// allocate. A span's watermark moves from `open` to `free` when the span ends
/// (`Shared::close_watermark`), under the lock the sampler raises `open` under.
#[derive(Debug, Default)]
pub(super) struct Watermarks {
    pub(super) open: Vec<Arc<Watermark>>,
    pub(super) free: Vec<Arc<Watermark>>,
}

/// Most watermarks kept for reuse.
pub(super) const FREE_WATERMARKS: usize = 256;

/// The figures at a span's start and the highest seen while it is open.
#[derive(Debug)]
pub(crate) struct Watermark {
    pub(super) start: Box<[AtomicReading]>,
    /// Devices failing when the span opened (bit `i`: device `i`).
    pub(super) start_failing: AtomicU64,
    pub(super) peaks: Box<[AtomicReading]>,
    pub(super) samples: AtomicU64,
    pub(super) errors: AtomicU64,
}

impl Watermark {
    pub(super) fn new(figures: usize) -> Self {
        let atomics = || (0..figures).map(|_| AtomicReading::none()).collect();
        Self {
            start: atomics(),
            start_failing: AtomicU64::new(0),
            peaks: atomics(),
            samples: AtomicU64::new(0),
            errors: AtomicU64::new(0),
        }
    }

    /// A figure when the span opened.
    pub(crate) fn start(&self, figure: usize) -> Reading {
        self.start[figure].load()
    }

    /// The highest reading of a figure while the span was open (start included).
    pub(crate) fn peak(&self, figure: usize) -> Reading {
        self.peaks[figure].load()
    }

    /// Devices failing when the span opened (bit `i`: device `i`).
    pub(crate) fn start_failing(&self) -> u64 {
        self.start_failing.load(Ordering::Relaxed)
    }

    /// Sampler ticks taken while the span was open.
    pub(crate) fn samples(&self) -> u64 {
        self.samples.load(Ordering::Relaxed)
    }

    /// Bit `i` set: device `i` failed a read while the span was open.
    pub(crate) fn errors(&self) -> u64 {
        self.errors.load(Ordering::Relaxed)
    }

    pub(super) fn raise(&self, figures: &[Reading], failing: u64) {
        for (peak, &value) in self.peaks.iter().zip(figures) {
            peak.raise(value);
        }
        self.samples.fetch_add(1, Ordering::Relaxed);
        if failing != 0 {
            self.errors.fetch_or(failing, Ordering::Relaxed);
        }
    }
}

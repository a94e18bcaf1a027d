//! A span's watermark: its figures at the start and the highest seen while it is open,
//! raised by the sampler at every tick; and what the sampler's power reads added up to
//! while it was open, which the export thread turns into the span's energy.
//!
//! The power figures are added by the sampler thread, not copied by the training thread at
//! the span's start and end: closing a span hands its watermark to the export thread, which
//! reads them there and gives the watermark back for reuse. A step span therefore costs the
//! training thread two stores for energy and throttling, whatever the number of devices.

use std::sync::atomic::{AtomicU64, Ordering};

use super::energy::{slot, SpanEnergy, REASONS};
use super::{AtomicReading, Reading};

/// The figures at a span's start and the highest seen while it is open.
#[derive(Debug)]
pub(crate) struct Watermark {
    start: Box<[AtomicReading]>,
    /// Devices failing when the span opened (bit `i`: device `i`).
    start_failing: AtomicU64,
    peaks: Box<[AtomicReading]>,
    samples: AtomicU64,
    errors: AtomicU64,
    /// What the power reads taken while the span was open add up to, in `slot`'s order
    /// (empty when the source reads no energy, power or clocks): increases from zero, a
    /// `NONE` when an increase was not measured; the latest power; the lowest clock upside
    /// down.
    power: Box<[AtomicReading]>,
}

impl Watermark {
    /// A watermark for `figures` memory figures and `power` power slots.
    pub(crate) fn new(figures: usize, power: usize) -> Self {
        let atomics = |n: usize| (0..n).map(|_| AtomicReading::none()).collect();
        let watermark = Self {
            start: atomics(figures),
            start_failing: AtomicU64::new(0),
            peaks: atomics(figures),
            samples: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            power: atomics(power),
        };
        watermark.clear_power();
        watermark
    }

    /// Starts it over from `latest` (the memory figures) and the devices failing now.
    pub(crate) fn open(&self, latest: &[AtomicReading], failing: u64) {
        for ((start, peak), latest) in self.start.iter().zip(self.peaks.iter()).zip(latest) {
            let value = latest.load();
            start.store(value);
            peak.store(value);
        }
        self.start_failing.store(failing, Ordering::Relaxed);
        self.samples.store(0, Ordering::Relaxed);
        self.errors.store(0, Ordering::Relaxed);
    }

    /// The power and the lowest clock read last before the span opened: a span with no
    /// power read of its own takes them.
    pub(crate) fn open_power(&self, power_now: Reading, clock_low: Reading) {
        if let Some(slot) = self.power.get(slot::POWER_NOW) {
            slot.store(power_now);
        }
        if let Some(slot) = self.power.get(slot::SM_CLOCK_LOW) {
            slot.store(clock_low);
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

    /// Raises the peaks to a tick's memory figures (those past them are left alone).
    pub(crate) fn raise(&self, figures: &[Reading], failing: u64) {
        for (peak, &value) in self.peaks.iter().zip(figures) {
            peak.raise(value);
        }
        self.samples.fetch_add(1, Ordering::Relaxed);
        if failing != 0 {
            self.errors.fetch_or(failing, Ordering::Relaxed);
        }
    }

    /// Raises one figure's peak (a value pushed between two ticks).
    pub(crate) fn raise_figure(&self, figure: usize, value: Reading) {
        if let Some(peak) = self.peaks.get(figure) {
            peak.raise(value);
        }
    }

    /// Adds one power read's increases (`slot`'s order, as `Power` makes them).
    pub(crate) fn add_power(&self, moved: &[Reading]) {
        for (i, (total, &by)) in self.power.iter().zip(moved).enumerate() {
            match i {
                slot::POWER_NOW => total.store(by),
                slot::SM_CLOCK_LOW => total.raise(by),
                _ => {
                    let sum = match (total.load().get(), by.get()) {
                        (Some(sum), Some(by)) => Reading::some(sum.saturating_add(by)),
                        _ => Reading::NONE,
                    };
                    total.store(sum);
                }
            }
        }
    }

    /// Whether it holds power figures, for the export thread to read.
    pub(crate) fn holds_power(&self) -> bool {
        !self.power.is_empty()
    }

    /// What the power reads added up to while the span was open; `None` without them.
    pub(crate) fn energy(&self) -> Option<SpanEnergy> {
        if self.power.is_empty() {
            return None;
        }
        let get = |slot: usize| self.power[slot].load().get();
        let count = |slot: usize| get(slot).unwrap_or(0);
        let reset = get(slot::RESETS) != Some(0);
        let counted = |slot: usize| get(slot).filter(|_| !reset);
        let mut reasons = 0u32;
        for i in 0..REASONS.len() {
            if count(slot::REASON0 + i) > 0 {
                reasons |= 1 << i;
            }
        }
        let devices = self.power.len() - slot::DEVICE_ENERGY0;
        Some(SpanEnergy {
            read: true,
            counted_uj: counted(slot::ENERGY),
            reset,
            power_sum_mw: get(slot::POWER_SUM),
            power_reads: count(slot::POWER_READS),
            power_now_mw: get(slot::POWER_NOW),
            throttled_reads: count(slot::THROTTLED),
            clock_reads: count(slot::CLOCK_READS),
            reasons,
            lowest_sm_mhz: slot::lowest_clock(self.power[slot::SM_CLOCK_LOW].load()),
            devices_uj: if devices > 1 {
                (0..devices)
                    .map(|i| counted(slot::DEVICE_ENERGY0 + i))
                    .collect()
            } else {
                Vec::new()
            },
        })
    }

    /// Sets the power figures back to nothing added yet, for the watermark's next span.
    pub(crate) fn clear_power(&self) {
        for (i, total) in self.power.iter().enumerate() {
            total.store(match i {
                slot::POWER_NOW | slot::SM_CLOCK_LOW => Reading::NONE,
                _ => Reading::some(0),
            });
        }
    }
}

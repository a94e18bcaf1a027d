//! Energy, power and clocks, read on the sampler thread at a cadence of their own (slower
//! than memory's), published as running totals (for the metrics) and, read by read, added
//! to the open spans' watermarks (for the spans), so that the training thread does not
//! copy them. The totals: the energy counters' increase summed over the
//! devices (a counter that goes back, a driver reload, is not added and counts a reset
//! instead, so a span open across it has no figure), the power readings' sum and count
//! (their mean times a span's duration estimates the energy of a span shorter than the
//! counter's update period), the readings with the clocks held down, and each reason's.

use std::time::{Duration, Instant};

use super::figure::power as slot;
pub(crate) use crate::figures::energy::REASONS;
use crate::figures::Reading;
use crate::source::{MemorySource, PowerReading};

/// Every reason's bit together: a reading with any of them is throttled.
const THROTTLING: u64 = 0x4 | 0x8 | 0x10 | 0x20 | 0x40 | 0x80;

/// The sampler thread's power state: what it read last and the totals it publishes.
pub(super) struct Power {
    interval: Duration,
    last_read: Option<Instant>,
    readings: Vec<PowerReading>,
    /// Per device, the counter's last value.
    counters: Vec<Option<u64>>,
    /// A device gave power but no counter in the latest read (an AMD GPU's hwmon has
    /// `power1_average` only): the counters' sum leaves it out, so spans take their
    /// figure from the summed power instead.
    power_only: bool,
    /// Per device, the counter's increase since the sampler started, in µJ.
    device_energy: Vec<u64>,
    energy: u64,
    resets: u64,
    power_sum: u64,
    power_reads: u64,
    power_now: Option<u64>,
    /// Reads in which a device gave its clock event reasons.
    clock_reads: u64,
    throttled: u64,
    reasons: [u64; REASONS.len()],
    lowest_clock: Option<u64>,
    /// When the summed counter last moved.
    moved_at: Option<Instant>,
    /// The latest time between two moves of the counters.
    pub(super) period: Option<Duration>,
    /// What the latest read added to the totals, in `slot`'s order: what the open spans'
    /// watermarks add up.
    moved: Vec<Reading>,
}

impl Power {
    /// `None` when the source reads no energy, power or clocks at all (asked once).
    pub(super) fn probe(source: &mut dyn MemorySource, interval: Duration) -> Option<Self> {
        let n = source.devices().len();
        let mut readings = vec![PowerReading::default(); n];
        source.read_power(&mut readings);
        let any = readings.iter().any(|r| {
            r.energy_uj.is_some()
                || r.power_mw.is_some()
                || r.clock_reasons.is_some()
                || r.sm_clock_mhz.is_some()
        });
        any.then(|| Self {
            interval,
            last_read: None,
            readings,
            counters: vec![None; n],
            power_only: false,
            device_energy: vec![0; n],
            energy: 0,
            resets: 0,
            power_sum: 0,
            power_reads: 0,
            power_now: None,
            clock_reads: 0,
            throttled: 0,
            reasons: [0; REASONS.len()],
            lowest_clock: None,
            moved_at: None,
            period: None,
            moved: vec![Reading::NONE; Self::slots(n)],
        })
    }

    /// How many figures the totals take with `devices` devices.
    pub(super) fn slots(devices: usize) -> usize {
        slot::DEVICE_ENERGY0 + devices
    }

    /// Reads the source when a power interval has passed since the last read, and writes
    /// the totals into `figures` (from `base`). Returns whether it read.
    pub(super) fn tick(
        &mut self,
        source: &mut dyn MemorySource,
        now: Instant,
        figures: &mut [Reading],
        base: usize,
    ) -> bool {
        if self
            .last_read
            .is_some_and(|last| now.duration_since(last) < self.interval)
        {
            return false;
        }
        self.last_read = Some(now);
        for reading in &mut self.readings {
            *reading = PowerReading::default();
        }
        source.read_power(&mut self.readings);
        self.add(now);
        self.publish(&mut figures[base..]);
        true
    }

    /// What the latest read added, for the open spans' watermarks.
    pub(super) fn moved(&self) -> &[Reading] {
        &self.moved
    }

    fn add(&mut self, now: Instant) {
        let before = self.energy;
        let counted_before = self.counted();
        let resets_before = self.resets;
        let throttled_before = self.throttled;
        for (i, moved) in self.moved[slot::DEVICE_ENERGY0..].iter_mut().enumerate() {
            // Not counted until the device's counter has been read once.
            *moved = self.counters[i].map(|_| 0).into();
        }
        let mut power: Option<u64> = None;
        let mut reasons = 0u64;
        let mut lowest_clock: Option<u64> = None;
        let mut clocks_read = false;
        self.power_only = false;
        for (i, reading) in self.readings.iter().enumerate() {
            self.power_only |= reading.power_mw.is_some() && reading.energy_uj.is_none();
            match (self.counters[i], reading.energy_uj) {
                (Some(last), Some(now)) if now >= last => {
                    self.device_energy[i] += now - last;
                    self.energy += now - last;
                    self.moved[slot::DEVICE_ENERGY0 + i] = Reading::some(now - last);
                }
                // Went back (a driver reload), or stopped answering: what was drawn in
                // between is unknown.
                (Some(_), _) => self.resets += 1,
                (None, _) => {}
            }
            self.counters[i] = reading.energy_uj;
            if let Some(mw) = reading.power_mw {
                power = Some(power.unwrap_or(0) + mw);
            }
            reasons |= reading.clock_reasons.unwrap_or(0);
            clocks_read |= reading.clock_reasons.is_some();
            if let Some(clock) = reading.sm_clock_mhz {
                lowest_clock = Some(lowest_clock.map_or(clock, |low| low.min(clock)));
            }
        }
        if let Some(power) = power {
            self.power_sum += power;
            self.power_reads += 1;
        }
        // Apart from the power: a GPU may give its reasons and no power (an integrated
        // Intel GPU has no hwmon).
        if clocks_read {
            self.clock_reads += 1;
            if reasons & THROTTLING != 0 {
                self.throttled += 1;
            }
            for (count, (_, bit)) in self.reasons.iter_mut().zip(REASONS) {
                if reasons & bit != 0 {
                    *count += 1;
                }
            }
        }
        let once = |happened: bool| Reading::some(u64::from(happened));
        let counted = counted_before && self.counted();
        let moved = &mut self.moved;
        moved[slot::ENERGY] = counted.then_some(self.energy - before).into();
        moved[slot::RESETS] = Reading::some(self.resets - resets_before);
        moved[slot::POWER_SUM] = Reading::some(power.unwrap_or(0));
        moved[slot::POWER_READS] = once(power.is_some());
        moved[slot::POWER_NOW] = power.into();
        moved[slot::THROTTLED] = Reading::some(self.throttled - throttled_before);
        moved[slot::CLOCK_READS] = once(clocks_read);
        for (i, (_, bit)) in REASONS.iter().enumerate() {
            moved[slot::REASON0 + i] = once(clocks_read && reasons & bit != 0);
        }
        moved[slot::SM_CLOCK_LOW] = slot::upside_down(lowest_clock);
        self.power_now = power;
        self.lowest_clock = lowest_clock;
        if self.energy != before {
            if let Some(at) = self.moved_at.replace(now) {
                self.period = Some(now.duration_since(at));
            }
        }
    }

    /// Each device's latest power reading, in mW.
    pub(super) fn device_power(&self) -> impl Iterator<Item = Option<u64>> + '_ {
        self.readings.iter().map(|r| r.power_mw)
    }

    /// Whether the counters' sum covers every device that gives power.
    fn counted(&self) -> bool {
        self.counters.iter().any(Option::is_some) && !self.power_only
    }

    /// The totals, in `slot`'s order.
    fn publish(&self, out: &mut [Reading]) {
        let counted = self.counted();
        let read = self.power_reads > 0;
        out[slot::ENERGY] = counted.then_some(self.energy).into();
        out[slot::RESETS] = Reading::some(self.resets);
        out[slot::POWER_SUM] = read.then_some(self.power_sum).into();
        out[slot::POWER_READS] = Reading::some(self.power_reads);
        out[slot::POWER_NOW] = self.power_now.into();
        out[slot::THROTTLED] = Reading::some(self.throttled);
        out[slot::CLOCK_READS] = Reading::some(self.clock_reads);
        for (i, &count) in self.reasons.iter().enumerate() {
            out[slot::REASON0 + i] = Reading::some(count);
        }
        out[slot::SM_CLOCK_LOW] = slot::upside_down(self.lowest_clock);
        for (i, (&energy, counter)) in self.device_energy.iter().zip(&self.counters).enumerate() {
            out[slot::DEVICE_ENERGY0 + i] = counter.map(|_| energy).into();
        }
    }
}

//! This process's memory on each device, from the source's process lists, on a cadence of
//! their own.
//!
//! A process list costs far more than a memory read (a real driver takes about 4.5 ms per
//! device and holds its lock meanwhile, against about 12 µs for the memory). The lists are
//! planned from what they measurably cost ([`plan`]): each device is listed at most as
//! often as keeps all lists together under [`SHARE`] of the wall time and each device's
//! list under [`DEVICE_SHARE`], and never more often than device memory is read.
//!
//! Who lists: while a round over every device costs under [`SHARE`] of one sampling
//! interval, the sampler thread lists inline, right after its memory reads (a cheap list
//! then delays nothing measurable, and a tick's process figures are that tick's). Beyond
//! that, the lists move to the `gpuspan-procs` thread, one device at a time, spread
//! over the cadence, so a slow list never delays a memory read. The lister is behind a
//! mutex that only one of the two threads takes at a time (the other is parked).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::Thread;
use std::time::{Duration, Instant};

use super::cost::Cost;
use super::driver_check::DriverCheck;
use super::meter::Call;
use super::Shared;
use crate::figures::{AtomicReading, Reading};
use crate::record::GpuId;
use crate::source::ProcessLister;
use crate::util::sync::lock;

/// The most of the wall time all process lists together may take.
pub(crate) const SHARE: f64 = 0.05;
/// The most of the wall time one device's list (holding the driver's lock) may take: a
/// 4.5 ms list then runs about 4 times a second per device.
pub(crate) const DEVICE_SHARE: f64 = 0.02;

/// How often each device's list is read, and whether off the sampler thread, given what
/// each device's list costs.
pub(crate) fn plan(costs: &[Duration], interval: Duration) -> (Duration, bool) {
    let round: Duration = costs.iter().sum();
    let most = costs.iter().max().copied().unwrap_or_default();
    let every = interval
        .max(round.div_f64(SHARE))
        .max(most.div_f64(DEVICE_SHARE));
    (every, round > interval.mul_f64(SHARE))
}

/// What the thread that lists owns.
struct Listing {
    lister: Box<dyn ProcessLister>,
    costs: Vec<Cost>,
    /// The device the process thread lists next.
    next: usize,
    /// When the inline lists are due again.
    due: Option<Instant>,
    /// Devices not listed yet: the process thread lists them back to back, so the process
    /// figures are there from the first second, and spreads its lists from then on.
    unlisted: usize,
}

/// The per-device process figures and their cadence, shared by the sampler thread and the
/// process thread.
pub(super) struct Processes {
    listing: Mutex<Listing>,
    /// Per device: this process's memory at its latest list.
    values: Box<[AtomicReading]>,
    /// Per device: the most any list saw, over the run.
    peaks: Box<[AtomicReading]>,
    offloaded: AtomicBool,
    interval: Duration,
    thread: OnceLock<Thread>,
}

impl std::fmt::Debug for Processes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Processes")
            .field("offloaded", &self.offloaded)
            .finish_non_exhaustive()
    }
}

impl Processes {
    pub(super) fn new(lister: Box<dyn ProcessLister>, devices: usize, interval: Duration) -> Self {
        Self {
            listing: Mutex::new(Listing {
                lister,
                costs: vec![Cost::default(); devices],
                next: 0,
                due: None,
                unlisted: devices,
            }),
            values: (0..devices).map(|_| AtomicReading::none()).collect(),
            peaks: (0..devices).map(|_| AtomicReading::none()).collect(),
            offloaded: AtomicBool::new(false),
            interval,
            thread: OnceLock::new(),
        }
    }

    /// This process's memory on device `i` at its latest list.
    pub(super) fn value(&self, device: usize) -> Option<u64> {
        self.values[device].load().get()
    }

    /// On the sampler thread, at every tick: lists every device when the lists are inline
    /// and due.
    pub(super) fn tick(&self, shared: &Shared) {
        if self.offloaded.load(Ordering::Relaxed) {
            return;
        }
        let Ok(mut listing) = self.listing.try_lock() else {
            return;
        };
        let now = Instant::now();
        if listing.due.is_some_and(|due| now < due) {
            return;
        }
        // The first round, taken as gpuspan starts, lists every device, so that the first
        // span has this process's figures too. A later round that turns out to cost more
        // than its share of an interval stops there: the process thread goes on from the
        // next device.
        let first = listing.due.is_none();
        let budget = self.interval.mul_f64(SHARE);
        for device in 0..self.values.len() {
            self.list(&mut listing, device, shared);
            listing.next = device + 1;
            if !first && now.elapsed() > budget && device + 1 < self.values.len() {
                break;
            }
        }
        let every = self.replan(&listing, shared);
        listing.due = Some(now + every);
    }

    /// Lists one device, keeps its figure and what it cost.
    fn list(&self, listing: &mut Listing, device: usize, shared: &Shared) {
        let started = Instant::now();
        let value = listing.lister.list(device);
        let took = started.elapsed();
        if !listing.costs[device].measured() {
            listing.unlisted = listing.unlisted.saturating_sub(1);
        }
        listing.costs[device].record(took);
        let value = Reading::from(value);
        self.values[device].store(value);
        self.peaks[device].raise(value);
        shared.process_lists.fetch_add(1, Ordering::Relaxed);
        shared.meter(Call::Processes, took);
    }

    /// Plans the cadence from the latest costs, publishes it, and wakes the process thread
    /// when the lists move to it.
    fn replan(&self, listing: &Listing, shared: &Shared) -> Duration {
        let costs: Vec<Duration> = listing.costs.iter().map(Cost::get).collect();
        let (every, offload) = plan(&costs, self.interval);
        let round: Duration = costs.iter().sum();
        shared.process_cost_ns.store(Reading::some(nanos(round)));
        shared.process_every_ns.store(Reading::some(nanos(every)));
        let was = self.offloaded.swap(offload, Ordering::Relaxed);
        if offload && !was {
            if let Some(thread) = self.thread.get() {
                thread.unpark();
            }
        }
        every
    }

    /// The `gpuspan-procs` thread: lists one device at a time while the lists are off
    /// the sampler thread, spread evenly over the cadence.
    pub(super) fn run(self: &Arc<Self>, shared: &Shared, stop: &AtomicBool) {
        let _ = self.thread.set(std::thread::current());
        let devices = self.values.len().max(1);
        while !stop.load(Ordering::Relaxed) {
            if !self.offloaded.load(Ordering::Relaxed) {
                // Asleep until the lists move here (`replan`) or gpuspan stops: a thread
                // that woke to check would take a core from the program for nothing.
                std::thread::park();
                continue;
            }
            let pause = {
                let mut listing = lock(&self.listing);
                let device = listing.next % devices;
                listing.next = device + 1;
                self.list(&mut listing, device, shared);
                let every = self.replan(&listing, shared);
                if listing.unlisted > 0 {
                    Duration::ZERO
                } else {
                    every / u32::try_from(devices).unwrap_or(u32::MAX)
                }
            };
            let wake = Instant::now() + pause;
            while !stop.load(Ordering::Relaxed) {
                let now = Instant::now();
                if now >= wake {
                    break;
                }
                std::thread::park_timeout(wake - now);
            }
        }
    }

    /// Each device's listed peak against the driver's accounting of this process, asked
    /// once the lists have stopped; `None` when a list is still running (a driver call
    /// that hangs: asking the driver again would hang too).
    pub(super) fn check_against_driver(&self, ids: &[GpuId]) -> Option<Vec<DriverCheck>> {
        let mut listing = self.listing.try_lock().ok()?;
        let checks = ids
            .iter()
            .zip(self.peaks.iter())
            .enumerate()
            .map(|(position, (&device, peak))| DriverCheck {
                device,
                listed_peak: peak.load().get(),
                driver: listing.lister.driver_peak(position),
            })
            .collect();
        Some(checks)
    }

    pub(super) fn unpark(&self) {
        if let Some(thread) = self.thread.get() {
            thread.unpark();
        }
    }
}

pub(super) fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn cheap_lists_run_inline_at_every_tick() {
        let (every, offload) = plan(&[Duration::from_micros(3); 2], 5 * MS);
        assert_eq!((every, offload), (5 * MS, false));
    }

    #[test]
    fn a_real_drivers_lists_keep_under_their_share_off_the_sampler_thread() {
        let list = Duration::from_micros(4500);
        // Eight devices: all lists together under 5 % of the time.
        let (every, offload) = plan(&[list; 8], 5 * MS);
        assert!(offload);
        assert_eq!(every, 720 * MS);
        // One device: its list (the driver's lock) under 2 %: about 4 a second.
        let (every, offload) = plan(&[list], 5 * MS);
        assert!(offload);
        assert_eq!(every, 225 * MS);
    }
}

//! The last window of ticks, kept column by column, and the snapshot a finding takes of it.

use std::collections::VecDeque;

use crate::timeline::Tick;

/// The last `window` of ticks, column by column, so that a finding copies it out in a few
/// slice copies. A full ring reuses its buffers and allocates nothing.
#[derive(Debug, Default)]
pub(super) struct Ring {
    pub(super) window_nanos: u64,
    pub(super) times: VecDeque<u64>,
    /// One column per device.
    pub(super) used: Vec<VecDeque<Option<u64>>>,
    pub(super) process_gpu: VecDeque<Option<u64>>,
    pub(super) allocated: VecDeque<Option<u64>>,
    pub(super) reserved: VecDeque<Option<u64>>,
    /// The latest tick's totals.
    pub(super) totals: Vec<Option<u64>>,
    /// Per device: armed until it crosses, re-armed once it falls back below.
    pub(super) armed: Vec<bool>,
}

impl Ring {
    pub(super) fn new(window_nanos: u64) -> Self {
        Self {
            window_nanos,
            ..Self::default()
        }
    }

    pub(super) fn push(&mut self, tick: &Tick<'_>) {
        if tick.devices.len() != self.used.len() {
            // The device list is fixed for a sampler's life; a change starts afresh.
            *self = Self::new(self.window_nanos);
            self.used = vec![VecDeque::new(); tick.devices.len()];
        }
        let horizon = tick.unix_nanos.saturating_sub(self.window_nanos);
        let mut old = 0;
        while self.times.get(old).is_some_and(|&t| t < horizon) {
            old += 1;
        }
        if old > 0 {
            self.times.drain(..old);
            for column in &mut self.used {
                column.drain(..old);
            }
            self.process_gpu.drain(..old);
            self.allocated.drain(..old);
            self.reserved.drain(..old);
        }
        self.times.push_back(tick.unix_nanos);
        for (column, used) in self.used.iter_mut().zip(tick.devices) {
            column.push_back(*used);
        }
        self.process_gpu.push_back(tick.process_gpu);
        self.allocated.push_back(tick.allocated);
        self.reserved.push_back(tick.reserved);
        self.totals.clear();
        self.totals.extend_from_slice(tick.totals);
    }

    /// An owned copy of the ring, for the writer thread.
    pub(super) fn snapshot(&self) -> Snapshot {
        Snapshot {
            times: copy(&self.times),
            used: self.used.iter().map(copy).collect(),
            process_gpu: copy(&self.process_gpu),
            allocated: copy(&self.allocated),
            reserved: copy(&self.reserved),
            totals: self.totals.clone(),
        }
    }
}

/// A ring's contents in one piece each: slice copies, not element by element.
pub(super) fn copy<T: Copy>(column: &VecDeque<T>) -> Vec<T> {
    let (front, back) = column.as_slices();
    let mut out = Vec::with_capacity(front.len() + back.len());
    out.extend_from_slice(front);
    out.extend_from_slice(back);
    out
}

/// The ring as it stood at a finding, owned by the finding.
#[derive(Debug, Default)]
pub(super) struct Snapshot {
    pub(super) times: Vec<u64>,
    /// One column per device.
    pub(super) used: Vec<Vec<Option<u64>>>,
    pub(super) process_gpu: Vec<Option<u64>>,
    pub(super) allocated: Vec<Option<u64>>,
    pub(super) reserved: Vec<Option<u64>>,
    pub(super) totals: Vec<Option<u64>>,
}

impl Snapshot {
    pub(super) fn devices(&self) -> usize {
        self.used.len()
    }

    /// Device `device`'s figure at every tick, oldest first.
    pub(super) fn column(&self, device: usize) -> &[Option<u64>] {
        self.used.get(device).map_or(&[], Vec::as_slice)
    }

    /// The latest figure of `device`.
    pub(super) fn last_used(&self, device: usize) -> Option<u64> {
        self.column(device).last().copied().flatten()
    }

    /// The highest figure of `device` in the window.
    pub(super) fn peak(&self, device: usize) -> Option<u64> {
        self.column(device).iter().flatten().copied().max()
    }

    pub(super) fn total(&self, device: usize) -> Option<u64> {
        self.totals.get(device).copied().flatten()
    }
}

/// When the rise to the crossing began: the first tick after the device last stood within
/// a tenth of the way from the ring's lowest figure to the latest one, with that low
/// figure.
pub(super) fn rise_start(ring: &Snapshot, device: usize) -> Option<(u64, u64)> {
    let latest = ring.last_used(device)?;
    let column = ring.column(device);
    // Plain loops over the slice: this runs on the sampler thread, once per crossing device.
    let mut lowest = u64::MAX;
    for value in column {
        if let Some(value) = *value {
            lowest = lowest.min(value);
        }
    }
    let mark = lowest + latest.saturating_sub(lowest) / 10;
    let mut low = column.len();
    while low > 0 {
        low -= 1;
        if let Some(value) = column[low] {
            if value <= mark {
                let risen = ring.times.get(low + 1).unwrap_or(&ring.times[low]);
                return Some((*risen, value));
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::timeline::Tick;

    fn ring_of(values: &[u64]) -> Ring {
        let mut ring = Ring::new(5_000);
        for (i, &v) in values.iter().enumerate() {
            let used = [Some(v)];
            let totals = [Some(100)];
            ring.push(&Tick {
                totals: &totals,
                ..Tick::of_devices(1000 * (i as u64 + 1), &used)
            });
        }
        ring
    }

    #[test]
    fn the_ring_keeps_only_its_window() {
        let ring = ring_of(&[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
        let times: Vec<u64> = ring.times.iter().copied().collect();
        assert_eq!(times, [5000, 6000, 7000, 8000, 9000, 10000]);
    }

    #[test]
    fn the_rise_starts_where_the_device_last_stood_low() {
        let ring = ring_of(&[40, 30, 31, 30, 50, 70, 96]);
        // Window 5 µs: 30, 31, 30, 50, 70, 96 are kept; lowest 30, mark 36: the rise
        // starts with the 50 read after the last 30.
        assert_eq!(rise_start(&ring.snapshot(), 0), Some((5000, 30)));
    }
}

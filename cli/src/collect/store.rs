//! The range-max store: the maximum of any past window of a memory timeline, answered in
//! microseconds whatever the window's age, in memory fixed when the store is made.
//!
//! Recent samples are kept one by one (full resolution); older ones only as the maxima of
//! fixed-width buckets, at one or more coarser levels. Every level is a ring of slots with a
//! max segment tree over it, so a window's maximum costs a binary search and `O(log n)`
//! tree nodes, never a scan. All levels are allocated up front, so the memory bound holds
//! from the first sample.
//!
//! A slot holds one value per series (each device, and their sum, for example). Values are
//! stored plus one, so that 0 means "not measured" and an unmeasured figure can never win a
//! maximum or be reported as a value.

use std::time::Duration;

/// One level: a ring of slots (samples, or buckets of `width_ns`) with a max tree.
#[derive(Debug)]
struct Level {
    /// Bucket width in ns; 0 keeps every sample in its own slot.
    width_ns: u64,
    /// Ring capacity, a power of two.
    slots: usize,
    series: usize,
    /// Per physical slot: the sample time, or the bucket's start.
    times: Vec<u64>,
    /// Segment tree: node `n` of series `s` at `n * series + s`; leaves at `slots..2 * slots`.
    tree: Vec<u64>,
    /// The physical slot written next.
    head: usize,
    /// Slots in use.
    len: usize,
    /// Slots ever started (more than `slots`: the oldest have been overwritten).
    started: u64,
}

impl Level {
    fn new(width_ns: u64, slots: usize, series: usize) -> Self {
        Self {
            width_ns,
            slots,
            series,
            times: vec![0; slots],
            tree: vec![0; 2 * slots * series],
            head: 0,
            len: 0,
            started: 0,
        }
    }

    fn heap_bytes(&self) -> usize {
        (self.times.capacity() + self.tree.capacity()) * std::mem::size_of::<u64>()
    }

    /// Physical slot of logical index `i` (0: the oldest slot kept).
    fn physical(&self, i: usize) -> usize {
        (self.head + self.slots - self.len + i) & (self.slots - 1)
    }

    fn time(&self, i: usize) -> u64 {
        self.times[self.physical(i)]
    }

    fn evicted(&self) -> bool {
        self.started > self.slots as u64
    }

    /// Adds a sample (encoded values, one per series) taken at `at`.
    fn push(&mut self, at: u64, values: &[u64]) {
        let key = if self.width_ns == 0 {
            at
        } else {
            at - at % self.width_ns
        };
        if self.width_ns != 0 && self.len > 0 && self.time(self.len - 1) == key {
            let p = self.physical(self.len - 1);
            self.raise(p, values);
            return;
        }
        if self.len > 0 && key < self.time(self.len - 1) {
            // The wall clock stepped back: keep the ring sorted by folding the sample into
            // the newest slot rather than reordering history.
            let p = self.physical(self.len - 1);
            self.raise(p, values);
            return;
        }
        let p = self.head;
        self.times[p] = key;
        let leaf = (self.slots + p) * self.series;
        self.tree[leaf..leaf + self.series].copy_from_slice(values);
        self.head = (self.head + 1) & (self.slots - 1);
        self.len = (self.len + 1).min(self.slots);
        self.started += 1;
        self.update(p);
    }

    /// Raises the leaf at physical slot `p` to `values`.
    fn raise(&mut self, p: usize, values: &[u64]) {
        let leaf = (self.slots + p) * self.series;
        let mut changed = false;
        for (slot, &v) in self.tree[leaf..leaf + self.series].iter_mut().zip(values) {
            if v > *slot {
                *slot = v;
                changed = true;
            }
        }
        if changed {
            self.update(p);
        }
    }

    /// Recomputes the ancestors of physical slot `p`.
    fn update(&mut self, p: usize) {
        let s = self.series;
        let mut node = (self.slots + p) / 2;
        while node >= 1 {
            let (left, right) = (2 * node * s, (2 * node + 1) * s);
            for k in 0..s {
                self.tree[node * s + k] = self.tree[left + k].max(self.tree[right + k]);
            }
            node /= 2;
        }
    }

    /// Logical index of the last slot whose time is at or before `t`.
    fn last_at_or_before(&self, t: u64) -> Option<usize> {
        // Number of slots with time <= t (times are sorted in logical order).
        let (mut lo, mut hi) = (0, self.len);
        while lo < hi {
            let mid = (lo + hi) / 2;
            if self.time(mid) <= t {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        lo.checked_sub(1)
    }

    /// Encoded values of logical slot `i`.
    fn values(&self, i: usize) -> &[u64] {
        let leaf = (self.slots + self.physical(i)) * self.series;
        &self.tree[leaf..leaf + self.series]
    }

    /// Max over logical slots `a..=b` into `out` (encoded).
    fn max(&self, a: usize, b: usize, out: &mut [u64]) {
        out.fill(0);
        let (pa, pb) = (self.physical(a), self.physical(b));
        if pa <= pb {
            self.max_physical(pa, pb, out);
        } else {
            self.max_physical(pa, self.slots - 1, out);
            self.max_physical(0, pb, out);
        }
    }

    fn max_physical(&self, a: usize, b: usize, out: &mut [u64]) {
        let s = self.series;
        let (mut l, mut r) = (a + self.slots, b + self.slots + 1);
        let mut take = |node: usize| {
            for (k, o) in out.iter_mut().enumerate() {
                *o = (*o).max(self.tree[node * s + k]);
            }
        };
        while l < r {
            if l & 1 == 1 {
                take(l);
                l += 1;
            }
            if r & 1 == 1 {
                r -= 1;
                take(r);
            }
            l /= 2;
            r /= 2;
        }
    }
}

/// How many slots each level keeps, finest first; the first level holds single samples.
#[derive(Debug, Clone)]
pub(crate) struct Layout {
    /// `(bucket width, slots)`; width zero for full resolution. Slots are rounded up to a
    /// power of two.
    pub(crate) levels: Vec<(Duration, usize)>,
}

impl Layout {
    /// Devices: about 11 minutes of 5 ms samples, then 100 ms maxima for 1.8 hours and 1 s
    /// maxima for 36 hours: 47.5 MiB with 8 devices and their sum. With more series, every
    /// level shrinks (by powers of two) to stay within 64 MiB.
    pub(crate) fn devices(series: usize) -> Self {
        let mut levels = vec![
            (Duration::ZERO, 1 << 17),
            (Duration::from_millis(100), 1 << 16),
            (Duration::from_secs(1), 1 << 17),
        ];
        while Self::bytes_for(&levels, series) > BUDGET_BYTES && levels[0].1 > 1 << 10 {
            for level in &mut levels {
                level.1 /= 2;
            }
        }
        Self { levels }
    }

    /// One process: 41 s of samples at 5 ms, 1 s maxima for 2.3 hours, 1 minute maxima for
    /// 34 hours (442 KiB).
    pub(crate) fn process() -> Self {
        Self {
            levels: vec![
                (Duration::ZERO, 1 << 13),
                (Duration::from_secs(1), 1 << 13),
                (Duration::from_secs(60), 1 << 11),
            ],
        }
    }

    fn bytes_for(levels: &[(Duration, usize)], series: usize) -> usize {
        levels
            .iter()
            .map(|&(_, slots)| slots.next_power_of_two() * (1 + 2 * series) * 8)
            .sum()
    }
}

/// The memory a device store may use: 24 hours of 8 devices fit.
pub(crate) const BUDGET_BYTES: usize = 64 << 20;

/// What a window of the timeline holds, per series. Values are bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct WindowMax {
    /// The figures at the window's start (last sample at or before it); `None` when the
    /// window began before the timeline or is older than full resolution.
    pub(crate) start: Option<Vec<Option<u64>>>,
    /// The figures at its end; `None` when older than full resolution.
    pub(crate) end: Option<Vec<Option<u64>>>,
    /// The highest figures: of the samples at start and end and in between, or, at a coarse
    /// resolution, of every bucket the window touches.
    pub(crate) peak: Vec<Option<u64>>,
    /// Samples strictly after the start and at or before the end (full resolution only).
    pub(crate) samples: Option<u64>,
    /// Width of what a figure stands for: the sampling interval at full resolution, else the
    /// bucket width.
    pub(crate) resolution_ns: u64,
}

/// The range-max store over a fixed number of series.
#[derive(Debug)]
pub(crate) struct TimelineStore {
    series: usize,
    interval_ns: u64,
    levels: Vec<Level>,
    latest: Option<u64>,
    scratch: Vec<u64>,
}

fn decode(v: u64) -> Option<u64> {
    v.checked_sub(1)
}

impl TimelineStore {
    /// A store of `series` figures per sample, sampled every `interval`.
    pub(crate) fn new(series: usize, interval: Duration, layout: &Layout) -> Self {
        let series = series.max(1);
        let levels = layout
            .levels
            .iter()
            .map(|&(width, slots)| {
                let width = u64::try_from(width.as_nanos()).unwrap_or(u64::MAX);
                Level::new(width, slots.max(2).next_power_of_two(), series)
            })
            .collect();
        Self {
            series,
            interval_ns: u64::try_from(interval.as_nanos()).unwrap_or(u64::MAX),
            levels,
            latest: None,
            scratch: vec![0; series],
        }
    }

    /// Bytes held on the heap (all allocated when the store is made).
    pub(crate) fn heap_bytes(&self) -> usize {
        self.levels.iter().map(Level::heap_bytes).sum::<usize>() + self.scratch.capacity() * 8
    }

    /// Time of the newest sample, UNIX ns.
    pub(crate) fn latest(&self) -> Option<u64> {
        self.latest
    }

    /// Adds the figures read at `unix_nanos` (`None`: not measured), one per series.
    pub(crate) fn push(&mut self, unix_nanos: u64, values: &[Option<u64>]) {
        for (slot, v) in self.scratch.iter_mut().zip(
            values
                .iter()
                .chain(std::iter::repeat(&None))
                .take(self.series),
        ) {
            *slot = v.map_or(0, |v| v.saturating_add(1));
        }
        let scratch = std::mem::take(&mut self.scratch);
        for level in &mut self.levels {
            level.push(unix_nanos, &scratch);
        }
        self.scratch = scratch;
        self.latest = Some(self.latest.map_or(unix_nanos, |l| l.max(unix_nanos)));
    }

    /// What is known of the window `start..=end` (UNIX ns); `None` when it ended before the
    /// first sample kept.
    pub(crate) fn window(&self, start: u64, end: u64) -> Option<WindowMax> {
        let end = end.max(start);
        let full = self.levels.first()?;
        let i_end = full.last_at_or_before(end);
        let full_covers_start = full.len > 0 && (!full.evicted() || full.time(0) <= start);
        let decode_all = |v: &[u64]| v.iter().map(|&x| decode(x)).collect::<Vec<_>>();
        let mut out = vec![0; self.series];
        if full_covers_start {
            let i_end = i_end?;
            let i_start = full.last_at_or_before(start);
            let from = i_start.unwrap_or(0);
            full.max(from, i_end, &mut out);
            return Some(WindowMax {
                start: i_start.map(|i| decode_all(full.values(i))),
                end: Some(decode_all(full.values(i_end))),
                peak: decode_all(&out),
                samples: Some((i_end - from) as u64 + u64::from(i_start.is_none())),
                resolution_ns: self.interval_ns,
            });
        }
        // Older than full resolution: the finest coarse level that reaches back far enough,
        // else the coarsest (which then covers the window only from what it still keeps).
        let coarse = self.levels[1..]
            .iter()
            .find(|l| l.len > 0 && (!l.evicted() || l.time(0) <= start))
            .or_else(|| self.levels[1..].iter().rev().find(|l| l.len > 0))?;
        let c_end = coarse.last_at_or_before(end)?;
        let c_start = coarse.last_at_or_before(start).unwrap_or(0);
        coarse.max(c_start, c_end, &mut out);
        Some(WindowMax {
            start: None,
            end: i_end.map(|i| decode_all(full.values(i))),
            peak: decode_all(&out),
            samples: None,
            resolution_ns: coarse.width_ns,
        })
    }
}

#[cfg(test)]
mod tests;

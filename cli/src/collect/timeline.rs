//! The collector's timelines: every device's memory (and their sum) and every process's,
//! fed by the sampler's ticks and queried by span windows.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use gpuspan::pipeline::lock;
use gpuspan::pipeline::ProcessTable;
use gpuspan::pipeline::{Tick, TickObserver};
use gpuspan::source::GpuId;

use super::store::{Layout, TimelineStore, WindowMax};
use super::tree::ProcessTree;

/// Processes followed at once; the one unseen longest makes room for a new one.
const MAX_PROCESSES: usize = 64;

/// What the collector knows of memory over time.
#[derive(Debug)]
pub(crate) struct Timelines {
    /// Devices in scope, in sampler order.
    pub(crate) device_ids: Vec<GpuId>,
    pub(crate) interval: Duration,
    devices: Mutex<TimelineStore>,
    processes: Mutex<HashMap<u32, Followed>>,
    /// The widest the process lists' cadence has been so far, in ns (0: not known).
    process_resolution_ns: AtomicU64,
    /// The earliest sample recorded, UNIX ns (`u64::MAX`: none yet).
    earliest: AtomicU64,
    tree: Mutex<Option<TreeMemory>>,
}

#[derive(Debug)]
struct Followed {
    store: TimelineStore,
    last_seen: u64,
}

/// The GPU memory of a command's process tree: at its first and latest tick, and the
/// highest sum seen.
#[derive(Debug)]
pub(crate) struct TreeMemory {
    tree: ProcessTree,
    pub(crate) start: Option<u64>,
    pub(crate) end: Option<u64>,
    pub(crate) peak: Option<u64>,
}

impl Timelines {
    pub(crate) fn new(device_ids: Vec<GpuId>, interval: Duration) -> Self {
        let series = device_ids.len() + 1;
        Self {
            devices: Mutex::new(TimelineStore::new(
                series,
                interval,
                &Layout::devices(series),
            )),
            device_ids,
            interval,
            processes: Mutex::new(HashMap::new()),
            process_resolution_ns: AtomicU64::new(0),
            earliest: AtomicU64::new(u64::MAX),
            tree: Mutex::new(None),
        }
    }

    /// Newest sample, UNIX ns.
    pub(crate) fn latest(&self) -> Option<u64> {
        lock(&self.devices).latest()
    }

    /// Devices `0..n`, then their sum at index `n`.
    pub(crate) fn devices_window(&self, start: u64, end: u64) -> Option<WindowMax> {
        lock(&self.devices).window(start, end)
    }

    /// What the driver said `pid` held over the window; `None` when it never listed it.
    pub(crate) fn process_window(&self, pid: u32, start: u64, end: u64) -> Option<WindowMax> {
        lock(&self.processes)
            .get(&pid)
            .and_then(|f| f.store.window(start, end))
    }

    /// The resolution, in ns, of process figures recorded at `recorded_ns`: the lists
    /// behind them run on a cadence of their own, so they are no finer than its coarsest
    /// so far, whatever the ticks' resolution.
    pub(crate) fn process_resolution_ns(&self, recorded_ns: u64) -> u64 {
        recorded_ns.max(self.process_resolution_ns.load(Ordering::Relaxed))
    }

    /// From the next tick on, sums the memory of `root` and its descendants.
    pub(crate) fn follow_tree(&self, root: u32) {
        *lock(&self.tree) = Some(TreeMemory {
            tree: ProcessTree::new(root),
            start: None,
            end: None,
            peak: None,
        });
    }

    /// The earliest sample recorded, UNIX ns: a span that ends before it gets no figures.
    pub(crate) fn earliest(&self) -> Option<u64> {
        let earliest = self.earliest.load(Ordering::Relaxed);
        (earliest != u64::MAX).then_some(earliest)
    }

    /// Stops following the tree and returns its figures.
    pub(crate) fn take_tree(&self) -> Option<TreeMemory> {
        lock(&self.tree).take()
    }

    /// Bytes the stores hold.
    pub(crate) fn heap_bytes(&self) -> usize {
        lock(&self.devices).heap_bytes()
            + lock(&self.processes)
                .values()
                .map(|f| f.store.heap_bytes())
                .sum::<usize>()
    }

    pub(crate) fn record(&self, tick: &Tick<'_>, processes: Option<&ProcessTable>, counter: u64) {
        let mut values: Vec<Option<u64>> = tick.devices.to_vec();
        let sum = values.iter().flatten().fold(None, |acc: Option<u64>, v| {
            Some(acc.unwrap_or(0).saturating_add(*v))
        });
        values.push(sum);
        lock(&self.devices).push(tick.unix_nanos, &values);
        self.earliest.fetch_min(tick.unix_nanos, Ordering::Relaxed);

        if let Some(ns) = tick.process_resolution_ns {
            self.process_resolution_ns.fetch_max(ns, Ordering::Relaxed);
        }
        let Some(table) = processes else { return };
        let list = lock(table);
        let mut followed = lock(&self.processes);
        for &(pid, _) in &list.by_pid {
            if !followed.contains_key(&pid) {
                if followed.len() >= MAX_PROCESSES {
                    if let Some(oldest) = followed
                        .iter()
                        .min_by_key(|(_, f)| f.last_seen)
                        .map(|(pid, _)| *pid)
                    {
                        followed.remove(&oldest);
                    }
                }
                let store = TimelineStore::new(1, self.interval, &Layout::process());
                followed.insert(
                    pid,
                    Followed {
                        store,
                        last_seen: counter,
                    },
                );
            }
        }
        for (pid, f) in followed.iter_mut() {
            let held = list.get(*pid);
            if held.is_some_and(|b| b > 0) {
                f.last_seen = counter;
            }
            f.store.push(tick.unix_nanos, &[held]);
        }
        drop(followed);
        if let Some(tree) = lock(&self.tree).as_mut() {
            let mut sum = Some(0u64);
            if !list.complete {
                sum = None;
            }
            for &(pid, bytes) in &list.by_pid {
                if tree.tree.contains(pid) {
                    sum = sum.map(|s| s.saturating_add(bytes));
                }
            }
            if let Some(sum) = sum {
                tree.start.get_or_insert(sum);
                tree.end = Some(sum);
                tree.peak = Some(tree.peak.map_or(sum, |p| p.max(sum)));
            }
        }
    }
}

impl TreeMemory {
    /// The command's process id.
    pub(crate) fn root(&self) -> u32 {
        self.tree.root()
    }
}

/// Feeds [`Timelines`] from the sampler thread.
pub(crate) struct Recorder {
    pub(crate) timelines: Arc<Timelines>,
    pub(crate) processes: Option<ProcessTable>,
    pub(crate) ticks: u64,
}

impl TickObserver for Recorder {
    fn on_tick(&mut self, tick: &Tick<'_>) {
        self.ticks += 1;
        self.timelines
            .record(tick, self.processes.as_ref(), self.ticks);
    }
}

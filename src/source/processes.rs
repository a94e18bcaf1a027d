//! Every process's GPU memory, for the collector: which process held what at the latest
//! reading. Filled by a source that was asked to keep it (the SDK path does not pay for it),
//! read by tick observers on the same sampler thread right after.

use std::sync::{Arc, Mutex};

/// The processes the driver listed at the latest reading.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProcessList {
    /// `(pid, bytes)`, summed over the devices in scope; sorted by pid.
    pub by_pid: Vec<(u32, u64)>,
    /// `false` when a device could not list its processes this time: a process missing
    /// from `by_pid` may then still hold memory.
    pub complete: bool,
}

/// Shared between the source (writer) and the observers (readers).
pub type ProcessTable = Arc<Mutex<ProcessList>>;

impl ProcessList {
    /// Adds `bytes` held by `pid` on one device.
    #[cfg_attr(not(feature = "nvml"), allow(dead_code))]
    pub(crate) fn add(&mut self, pid: u32, bytes: u64) {
        match self.by_pid.binary_search_by_key(&pid, |p| p.0) {
            Ok(i) => self.by_pid[i].1 = self.by_pid[i].1.saturating_add(bytes),
            Err(i) => self.by_pid.insert(i, (pid, bytes)),
        }
    }

    /// What `pid` holds: `Some(0)` when the list is complete and does not name it.
    pub fn get(&self, pid: u32) -> Option<u64> {
        match self.by_pid.binary_search_by_key(&pid, |p| p.0) {
            Ok(i) => Some(self.by_pid[i].1),
            Err(_) => self.complete.then_some(0),
        }
    }
}

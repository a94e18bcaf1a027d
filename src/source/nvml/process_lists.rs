//! This process's memory on each device, from NVML's process lists: the sampler's own
//! figure until it takes the lists over, and every process's for `gpuspan collect`.

use std::sync::Arc;

use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::{Device as NvmlDevice, Nvml};

use super::super::processes::{ProcessList, ProcessTable};
use super::super::{DriverPeak, ProcessLister};
use super::{describe, is_unsupported};

/// Lists each device's processes: this process's memory, and every process's when a
/// table was asked for (`gpuspan collect`).
pub(crate) struct NvmlProcesses {
    nvml: Arc<Nvml>,
    handles: Vec<nvml_wrapper_sys::bindings::nvmlDevice_t>,
    pid: u32,
    /// Per device: `false` once the driver said it cannot list processes.
    supported: Vec<bool>,
    /// Per device: whether the driver can keep accounting for it. Not for a MIG instance:
    /// NVML keeps accounting off on a GPU in MIG mode and refuses to turn it on, so saying
    /// how to turn it on would mislead.
    accountable: Vec<bool>,
    /// Every process's memory, kept only when asked for, from each device's latest list
    /// (`None`: that list was incomplete).
    all: Option<(ProcessTable, Vec<Option<DeviceList>>)>,
    /// Whether GPUs NVML does not list are measured too (the table is then incomplete).
    other_devices: bool,
}

/// One device's processes as `(pid, bytes)`.
type DeviceList = Vec<(u32, u64)>;

// SAFETY: as for `NvmlSource`; the lister is used by one thread at a time.
unsafe impl Send for NvmlProcesses {}

impl NvmlProcesses {
    pub(super) fn new(
        nvml: Arc<Nvml>,
        handles: Vec<nvml_wrapper_sys::bindings::nvmlDevice_t>,
        accountable: Vec<bool>,
    ) -> Self {
        Self {
            supported: vec![true; handles.len()],
            accountable,
            nvml,
            handles,
            pid: std::process::id(),
            all: None,
            other_devices: false,
        }
    }

    pub(super) fn keep_all(&mut self, table: ProcessTable, other_devices: bool) {
        self.all = Some((table, vec![None; self.handles.len()]));
        self.other_devices = other_devices;
    }

    /// Sums the devices' latest lists into the shared table.
    fn publish(&mut self, position: usize, list: Option<DeviceList>) {
        let Some((table, lists)) = &mut self.all else {
            return;
        };
        lists[position] = list;
        let mut merged = ProcessList {
            by_pid: Vec::new(),
            complete: !self.other_devices,
        };
        for list in lists.iter() {
            match list {
                Some(list) => list.iter().for_each(|&(pid, bytes)| merged.add(pid, bytes)),
                None => merged.complete = false,
            }
        }
        *table.lock().unwrap_or_else(|p| p.into_inner()) = merged;
    }
}

impl ProcessLister for NvmlProcesses {
    fn list(&mut self, position: usize) -> Option<u64> {
        let (Some(&handle), Some(true)) = (
            self.handles.get(position),
            self.supported.get(position).copied(),
        ) else {
            self.publish(position, None);
            return None;
        };
        // SAFETY: the handle came from `self.nvml`, which outlives this borrow.
        let device = unsafe { NvmlDevice::new(handle, &self.nvml) };
        let processes = match device.running_compute_processes() {
            Ok(processes) => processes,
            Err(e) => {
                if is_unsupported(&e) {
                    self.supported[position] = false;
                }
                self.publish(position, None);
                return None;
            }
        };
        let mut mine = Some(0u64);
        for process in processes.iter().filter(|p| p.pid == self.pid) {
            mine = match (mine, &process.used_gpu_memory) {
                (Some(sum), UsedGpuMemory::Used(bytes)) => Some(sum + bytes),
                _ => None,
            };
        }
        if self.all.is_some() {
            let mut list = Some(Vec::with_capacity(processes.len()));
            for process in &processes {
                match (process.used_gpu_memory.clone(), &mut list) {
                    (UsedGpuMemory::Used(bytes), Some(list)) => list.push((process.pid, bytes)),
                    _ => list = None,
                }
            }
            self.publish(position, list);
        }
        mine
    }

    fn driver_peak(&mut self, position: usize) -> DriverPeak {
        let Some(&handle) = self.handles.get(position) else {
            return DriverPeak::Unsupported;
        };
        if !self.accountable.get(position).copied().unwrap_or(false) {
            return DriverPeak::Unsupported;
        }
        // SAFETY: the handle came from `self.nvml`, which outlives this borrow.
        let device = unsafe { NvmlDevice::new(handle, &self.nvml) };
        match device.is_accounting_enabled() {
            Ok(true) => {}
            Ok(false) => return DriverPeak::Off,
            Err(e) if is_unsupported(&e) => return DriverPeak::Unsupported,
            Err(e) => return DriverPeak::Failed(describe(&e)),
        }
        match device.accounting_stats_for(self.pid) {
            Ok(stats) => stats
                .max_memory_usage
                .map_or(DriverPeak::NoRecord, DriverPeak::Peak),
            Err(NvmlError::NotFound) => DriverPeak::NoRecord,
            // NVML answers NotSupported when accounting was turned off meanwhile.
            Err(NvmlError::NotSupported) => DriverPeak::Off,
            Err(e) => DriverPeak::Failed(describe(&e)),
        }
    }
}

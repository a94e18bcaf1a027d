//! GPU memory through NVML (nvml-wrapper, `libnvidia-ml` loaded at run time).

use std::ffi::OsStr;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use nvml_wrapper::error::NvmlError;
use nvml_wrapper::{Device as NvmlDevice, Nvml};
use nvml_wrapper_sys::bindings::NVML_DEVICE_MIG_ENABLE;

mod process_lists;
use super::processes::ProcessTable;
use super::scope::AmbiguousDevice;
use super::{Device, DeviceReading, DeviceScope, MemorySource, PowerReading, ProcessLister};
pub(crate) use process_lists::NvmlProcesses;

/// Reads device memory and utilization from NVML, and this process's memory through its
/// [`NvmlProcesses`] until the sampler takes that over.
pub(crate) struct NvmlSource {
    nvml: Arc<Nvml>,
    /// Every GPU NVML counts, in scope or not: other vendors' devices are numbered after.
    count: u32,
    handles: Vec<nvml_wrapper_sys::bindings::nvmlDevice_t>,
    devices: Vec<Device>,
    /// `false` once the driver said it has no utilization counters.
    utilization_query: Vec<bool>,
    /// The last utilization read, and when: the driver averages it over its own sample
    /// period (about 1/6 s to 1 s), so reading it at every tick would only cost time.
    utilization: Vec<Option<f64>>,
    utilization_read: Option<Instant>,
    utilization_time: Option<Duration>,
    /// This process's memory, listed at every read until `process_lister` hands it over.
    processes: Option<NvmlProcesses>,
    /// Per device, the whole GPU's handle (a MIG instance's parent) that energy, power
    /// and clocks are read from, or `None` when an earlier device has the same GPU.
    boards: Vec<Option<nvml_wrapper_sys::bindings::nvmlDevice_t>>,
    /// Per device: which of energy, power, clock reasons and SM clock the driver answers
    /// (`false` once it said it never will).
    power_queries: Vec<[bool; 4]>,
}

/// How often utilization is read from the driver.
const UTILIZATION_EVERY: Duration = Duration::from_millis(100);

// SAFETY: NVML handles are plain pointers into the driver, valid for the library's lifetime
// and documented as thread-safe; the source is used by one thread at a time.
unsafe impl Send for NvmlSource {}

impl std::fmt::Debug for NvmlSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NvmlSource")
            .field("devices", &self.devices)
            .finish_non_exhaustive()
    }
}

/// Why NVML is not used.
#[derive(Debug)]
pub(crate) enum NvmlUnavailable {
    /// NVML cannot be loaded or asked, in words.
    Unavailable(String),
    /// A UUID prefix in scope starts several devices' UUIDs.
    Ambiguous(AmbiguousDevice),
}

impl NvmlSource {
    /// Loads NVML from `lib` (else the system's `libnvidia-ml.so.1`) and opens the devices
    /// in `scope`.
    pub(crate) fn open(lib: Option<&Path>, scope: &DeviceScope) -> Result<Self, NvmlUnavailable> {
        let default = OsStr::new("libnvidia-ml.so.1");
        let path = lib.map_or(default, Path::as_os_str);
        let nvml = Nvml::builder().lib_path(path).init().map_err(|e| {
            NvmlUnavailable::Unavailable(format!(
                "NVML could not be loaded from {} ({})",
                path.to_string_lossy(),
                describe(&e)
            ))
        })?;
        let count = nvml.device_count().map_err(|e| {
            NvmlUnavailable::Unavailable(format!("NVML could not count devices ({})", describe(&e)))
        })?;
        let (in_scope, every) = devices_in_scope(&nvml, count, scope);
        if let Some(ambiguous) = scope.ambiguity(&every) {
            return Err(NvmlUnavailable::Ambiguous(ambiguous));
        }
        let picked = scope.pick(in_scope);
        let (handles, devices): (Vec<_>, Vec<_>) = picked.into_iter().unzip();
        let boards = boards(&nvml, &handles, &devices);
        let n = devices.len();
        let nvml = Arc::new(nvml);
        Ok(Self {
            count,
            processes: Some(NvmlProcesses::new(
                Arc::clone(&nvml),
                handles.clone(),
                devices.iter().map(|d| d.mig.is_none()).collect(),
            )),
            nvml,
            handles,
            devices,
            utilization_query: vec![true; n],
            utilization: vec![None; n],
            utilization_read: None,
            utilization_time: None,
            power_queries: vec![[true; 4]; n],
            boards,
        })
    }

    /// How many GPUs NVML counts, in scope or not.
    pub(crate) fn count(&self) -> u32 {
        self.count
    }

    /// Also keeps every process's memory (not only this process's) in `table` as the
    /// lists come in, for spans of other processes. With `other_devices` (GPUs NVML does
    /// not read are measured too), the table is never complete: a process NVML does not
    /// list may hold memory on those, so it is not measured rather than zero.
    pub(crate) fn with_process_table(mut self, table: ProcessTable, other_devices: bool) -> Self {
        if let Some(processes) = &mut self.processes {
            processes.keep_all(table, other_devices);
        }
        self
    }
}

impl MemorySource for NvmlSource {
    fn name(&self) -> &str {
        "nvml"
    }

    fn devices(&self) -> &[Device] {
        &self.devices
    }

    fn read(&mut self, out: &mut [DeviceReading]) {
        let now = Instant::now();
        let read_utilization = self
            .utilization_read
            .is_none_or(|last| now.duration_since(last) >= UTILIZATION_EVERY);
        if read_utilization {
            self.utilization_read = Some(now);
        }
        let mut utilization_time = Duration::ZERO;
        for (i, reading) in out.iter_mut().enumerate().take(self.handles.len()) {
            // SAFETY: the handle came from `self.nvml`, which outlives this borrow.
            let device = unsafe { NvmlDevice::new(self.handles[i], &self.nvml) };
            match device.memory_info() {
                Ok(memory) => {
                    reading.used = Some(memory.used);
                    reading.total = Some(memory.total);
                }
                Err(e) => reading.error = Some(describe(&e)),
            }
            if self.utilization_query[i] && reading.error.is_none() && read_utilization {
                let started = Instant::now();
                self.utilization[i] = match device.utilization_rates() {
                    Ok(rates) => Some(f64::from(rates.gpu) / 100.0),
                    Err(e) => {
                        self.utilization_query[i] = !is_unsupported(&e);
                        None
                    }
                };
                utilization_time += started.elapsed();
            }
            if reading.error.is_none() {
                reading.utilization = self.utilization[i];
                if let Some(processes) = &mut self.processes {
                    reading.process_used = processes.list(i);
                }
            }
        }
        self.utilization_time = read_utilization.then_some(utilization_time);
    }

    fn read_power(&mut self, out: &mut [PowerReading]) {
        for (i, reading) in out.iter_mut().enumerate().take(self.boards.len()) {
            let Some(handle) = self.boards[i] else {
                continue;
            };
            // SAFETY: the handle came from `self.nvml`, which outlives this borrow.
            let device = unsafe { NvmlDevice::new(handle, &self.nvml) };
            let asked = &mut self.power_queries[i];
            reading.energy_uj = ask(&mut asked[0], || device.total_energy_consumption())
                .and_then(|mj| mj.checked_mul(1000));
            reading.power_mw = ask(&mut asked[1], || device.power_usage().map(u64::from));
            reading.clock_reasons = ask(&mut asked[2], || clock_event_reasons(&self.nvml, &device));
            reading.sm_clock_mhz = ask(&mut asked[3], || {
                device
                    .clock_info(nvml_wrapper::enum_wrappers::device::Clock::SM)
                    .map(u64::from)
            });
        }
    }

    fn energy_scope(&self) -> Option<&'static str> {
        self.devices
            .iter()
            .any(|d| d.mig.is_some())
            .then_some("gpu")
    }

    fn process_lister(&mut self) -> Option<Box<dyn ProcessLister>> {
        self.processes
            .take()
            .map(|p| Box::new(p) as Box<dyn ProcessLister>)
    }

    fn take_utilization_time(&mut self) -> Option<Duration> {
        self.utilization_time.take()
    }
}

/// The devices in scope with their handles, in NVML's order: each GPU, or for a GPU in MIG
/// mode each of its instances; then every GPU and instance, in scope or not.
fn devices_in_scope(
    nvml: &Nvml,
    count: u32,
    scope: &DeviceScope,
) -> (
    Vec<(nvml_wrapper_sys::bindings::nvmlDevice_t, Device)>,
    Vec<Device>,
) {
    let mut found = Vec::new();
    let mut every = Vec::new();
    for index in 0..count {
        let device = match nvml.device_by_index(index) {
            Ok(device) => device,
            Err(e) => {
                eprintln!(
                    "gpuspan: warning: NVML device {index} cannot be opened ({}); it is left out",
                    describe(&e)
                );
                continue;
            }
        };
        let gpu = Device {
            index,
            mig: None,
            uuid: device
                .uuid()
                .unwrap_or_else(|_| format!("nvml-index-{index}")),
            name: device.name().unwrap_or_else(|_| "NVIDIA GPU".to_owned()),
            vendor: "NVIDIA".to_owned(),
        };
        every.push(gpu.clone());
        let Some(instances) = mig_instances(index, &device) else {
            if scope.includes(&gpu) {
                // SAFETY: the handle stays valid while `nvml` is alive, and the source keeps it.
                found.push((unsafe { device.handle() }, gpu));
            }
            continue;
        };
        if instances.is_empty() && scope.includes(&gpu) {
            eprintln!(
                "gpuspan: warning: GPU {index} is in MIG mode with no MIG instance; it is \
                 left out (CUDA cannot run on it either)"
            );
        }
        // In MIG mode the instances are the devices, each with its own memory: the
        // parent's figures would count them all again. Naming the GPU (its index or
        // UUID) selects all of its instances; a `MIG-...` UUID, one.
        for (mig, instance) in instances {
            let info = Device {
                index,
                mig: Some(mig),
                uuid: instance
                    .uuid()
                    .unwrap_or_else(|_| format!("nvml-index-{index}-mig-{mig}")),
                name: instance
                    .name()
                    .unwrap_or_else(|_| format!("{} MIG", gpu.name)),
                vendor: gpu.vendor.clone(),
            };
            every.push(info.clone());
            if scope.includes(&gpu) || scope.includes(&info) {
                // SAFETY: as above; MIG handles live as long as `nvml` too.
                found.push((unsafe { instance.handle() }, info));
            }
        }
    }
    (found, every)
}

/// The MIG instances of a GPU in MIG mode, by their index on it; `None` when the GPU is not
/// in MIG mode (or cannot say, as drivers without MIG answer).
fn mig_instances<'nvml>(
    index: u32,
    gpu: &NvmlDevice<'nvml>,
) -> Option<Vec<(u32, NvmlDevice<'nvml>)>> {
    let mode = gpu.mig_mode().ok()?;
    if mode.current != NVML_DEVICE_MIG_ENABLE {
        return None;
    }
    let most = match gpu.mig_device_count() {
        Ok(most) => most,
        Err(e) => {
            eprintln!(
                "gpuspan: warning: GPU {index} is in MIG mode and cannot count its MIG \
                 instances ({}); it is left out",
                describe(&e)
            );
            return Some(Vec::new());
        }
    };
    // Indexes without an instance answer NotFound: the instances need not be contiguous.
    Some(
        (0..most)
            .filter_map(|mig| gpu.mig_device_by_index(mig).ok().map(|d| (mig, d)))
            .collect(),
    )
}

/// Per device, the GPU whose energy, power and clocks stand for it: itself, or a MIG
/// instance's parent; `None` for a device whose GPU an earlier one already stands for, so
/// that a board is counted once.
fn boards(
    nvml: &Nvml,
    handles: &[nvml_wrapper_sys::bindings::nvmlDevice_t],
    devices: &[Device],
) -> Vec<Option<nvml_wrapper_sys::bindings::nvmlDevice_t>> {
    let mut seen = Vec::new();
    handles
        .iter()
        .zip(devices)
        .map(|(&handle, device)| {
            if seen.contains(&device.index) {
                return None;
            }
            seen.push(device.index);
            match device.mig {
                None => Some(handle),
                // SAFETY: the GPU's handle lives as long as `nvml`, as its instances' do.
                Some(_) => nvml
                    .device_by_index(device.index)
                    .ok()
                    .map(|gpu| unsafe { gpu.handle() }),
            }
        })
        .collect()
}

/// NVML's clock event reasons, through `nvmlDeviceGetCurrentClocksEventReasons` where the
/// driver has it, else its older name.
fn clock_event_reasons(nvml: &Nvml, device: &NvmlDevice<'_>) -> Result<u64, NvmlError> {
    let Ok(newer) = nvml.lib().nvmlDeviceGetCurrentClocksEventReasons.as_ref() else {
        return device.current_throttle_reasons().map(|r| r.bits());
    };
    let mut reasons = 0u64;
    // SAFETY: the symbol is NVML's, called with a handle of this library and a valid
    // pointer, as nvml-wrapper calls the older one.
    let code = unsafe { newer(device.handle(), &mut reasons) };
    match code {
        0 => Ok(reasons),
        code => Err(nvml_wrapper::error::nvml_try(code)
            .err()
            .unwrap_or(NvmlError::Unknown)),
    }
}

/// A reading's value, or `None`; stops asking (`asked` false) when the driver never will.
fn ask(asked: &mut bool, read: impl FnOnce() -> Result<u64, NvmlError>) -> Option<u64> {
    if !*asked {
        return None;
    }
    match read() {
        Ok(value) => Some(value),
        Err(e) => {
            *asked = !is_unsupported(&e);
            None
        }
    }
}

/// Errors that mean "this driver will never answer this query": stop asking.
fn is_unsupported(error: &NvmlError) -> bool {
    matches!(
        error,
        NvmlError::NotSupported | NvmlError::FailedToLoadSymbol(_) | NvmlError::NoPermission
    )
}

/// NVML's errors in words a user can act on.
fn describe(error: &NvmlError) -> String {
    match error {
        NvmlError::GpuLost => "GPU is lost (fell off the bus)".to_owned(),
        NvmlError::LibloadingError(e) => format!("library not found: {e}"),
        NvmlError::DriverNotLoaded => "the NVIDIA driver is not loaded".to_owned(),
        other => other.to_string(),
    }
}

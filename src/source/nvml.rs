//! GPU memory through NVML (nvml-wrapper, `libnvidia-ml` loaded at run time).

use std::ffi::OsStr;
use std::path::Path;
use std::time::{Duration, Instant};

use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::{Device as NvmlDevice, Nvml};

use super::processes::{ProcessList, ProcessTable};
use super::{Device, DeviceReading, DeviceScope, MemorySource};

/// Reads device memory, utilization and this process's memory from NVML.
pub(crate) struct NvmlSource {
    nvml: Nvml,
    handles: Vec<nvml_wrapper_sys::bindings::nvmlDevice_t>,
    devices: Vec<Device>,
    pid: u32,
    /// Per device: `false` once the driver said it cannot list processes.
    process_query: Vec<bool>,
    /// `false` once the driver said it has no utilization counters.
    utilization_query: Vec<bool>,
    /// The last utilization read, and when: the driver averages it over its own sample
    /// period (about 1/6 s to 1 s), so reading it at every tick would only cost time.
    utilization: Vec<Option<f64>>,
    utilization_read: Option<Instant>,
    /// Every process's memory, kept only when asked for (`with_process_table`).
    all_processes: Option<ProcessTable>,
    process_buffer: ProcessList,
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
pub(crate) struct NvmlUnavailable(pub(crate) String);

impl NvmlSource {
    /// Loads NVML from `lib` (else the system's `libnvidia-ml.so.1`) and opens the devices
    /// in `scope`.
    pub(crate) fn open(lib: Option<&Path>, scope: &DeviceScope) -> Result<Self, NvmlUnavailable> {
        let default = OsStr::new("libnvidia-ml.so.1");
        let path = lib.map_or(default, Path::as_os_str);
        let nvml = Nvml::builder().lib_path(path).init().map_err(|e| {
            NvmlUnavailable(format!(
                "NVML could not be loaded from {} ({})",
                path.to_string_lossy(),
                describe(&e)
            ))
        })?;
        let count = nvml.device_count().map_err(|e| {
            NvmlUnavailable(format!("NVML could not count devices ({})", describe(&e)))
        })?;
        let mut handles = Vec::new();
        let mut devices = Vec::new();
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
            let info = Device {
                index,
                uuid: device
                    .uuid()
                    .unwrap_or_else(|_| format!("nvml-index-{index}")),
                name: device.name().unwrap_or_else(|_| "NVIDIA GPU".to_owned()),
                vendor: "NVIDIA".to_owned(),
            };
            if scope.includes(&info) {
                // SAFETY: the handle stays valid while `nvml` is alive, and `nvml` is kept.
                handles.push(unsafe { device.handle() });
                devices.push(info);
            }
        }
        let picked = scope.pick(handles.into_iter().zip(devices).collect());
        let (handles, devices): (Vec<_>, Vec<_>) = picked.into_iter().unzip();
        let n = devices.len();
        Ok(Self {
            nvml,
            handles,
            devices,
            pid: std::process::id(),
            process_query: vec![true; n],
            utilization_query: vec![true; n],
            utilization: vec![None; n],
            utilization_read: None,
            all_processes: None,
            process_buffer: ProcessList::default(),
        })
    }

    /// Also keeps every process's memory (not only this process's) in `table` at each
    /// reading, for spans of other processes.
    #[cfg_attr(not(feature = "collect"), allow(dead_code))]
    pub(crate) fn with_process_table(mut self, table: ProcessTable) -> Self {
        self.all_processes = Some(table);
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
        let keep_all = self.all_processes.is_some();
        self.process_buffer.by_pid.clear();
        self.process_buffer.complete = true;
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
            let mut utilization_supported = self.utilization_query[i];
            if utilization_supported && reading.error.is_none() && read_utilization {
                self.utilization[i] = match device.utilization_rates() {
                    Ok(rates) => Some(f64::from(rates.gpu) / 100.0),
                    Err(e) => {
                        utilization_supported = !is_unsupported(&e);
                        None
                    }
                };
            }
            if reading.error.is_none() {
                reading.utilization = self.utilization[i];
            }
            let mut process_supported = self.process_query[i];
            if process_supported && reading.error.is_none() {
                match device.running_compute_processes() {
                    Ok(processes) => {
                        let mut mine = Some(0u64);
                        for process in processes.iter().filter(|p| p.pid == self.pid) {
                            mine = match (mine, &process.used_gpu_memory) {
                                (Some(sum), UsedGpuMemory::Used(bytes)) => Some(sum + bytes),
                                _ => None,
                            };
                        }
                        reading.process_used = mine;
                        if keep_all {
                            for process in &processes {
                                match process.used_gpu_memory {
                                    UsedGpuMemory::Used(bytes) => {
                                        self.process_buffer.add(process.pid, bytes)
                                    }
                                    UsedGpuMemory::Unavailable => {
                                        self.process_buffer.complete = false
                                    }
                                }
                            }
                        }
                    }
                    Err(e) if is_unsupported(&e) => process_supported = false,
                    Err(_) => self.process_buffer.complete = false,
                }
            }
            if !process_supported || reading.error.is_some() {
                self.process_buffer.complete = false;
            }
            self.utilization_query[i] = utilization_supported;
            self.process_query[i] = process_supported;
        }
        if let Some(table) = &self.all_processes {
            let mut shared = table.lock().unwrap_or_else(|p| p.into_inner());
            std::mem::swap(&mut *shared, &mut self.process_buffer);
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

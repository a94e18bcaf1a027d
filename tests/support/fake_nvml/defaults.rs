//! What the fake reports unless told otherwise, and the names and codes tests pass to it.

use std::time::Duration;

/// Define for [`FakeNvml::build_variant`](super::FakeNvml::build_variant): leaves out the symbols
/// `nvmlDeviceGetComputeRunningProcesses_v3` and
/// `nvmlDeviceGetGraphicsRunningProcesses_v3`, as a driver without them.
pub const NO_PROCESS_QUERIES: &str = "FAKE_NVML_NO_PROCESS_QUERIES";

/// One MiB in bytes.
pub const MIB: u64 = 1024 * 1024;

/// Total memory of a fake device by default (an H200's 143771 MiB).
pub const DEFAULT_TOTAL: u64 = 143_771 * MIB;

/// Used memory of a fake device by default.
pub const DEFAULT_USED: u64 = 1024 * MIB;

/// Driver version the fake reports.
pub const DRIVER_VERSION: &str = "570.86.15";

/// The power every fake GPU draws unless set, in milliwatts.
pub const DEFAULT_POWER_MW: u64 = 300_000;

/// The energy counter of a fake GPU as it loads, in millijoules.
pub const ENERGY_BASE_MJ: u64 = 5_000_000;

/// How often a fake GPU's energy counter moves.
pub const ENERGY_QUANTUM: Duration = Duration::from_millis(100);

/// NVML's clock event reasons (`nvmlClocksEventReason*`), for
/// [`FakeNvml::set_clocks_event_reasons`](super::FakeNvml::set_clocks_event_reasons).
pub mod reason {
    pub const GPU_IDLE: u64 = 0x1;
    pub const SW_POWER_CAP: u64 = 0x4;
    pub const HW_SLOWDOWN: u64 = 0x8;
    pub const SW_THERMAL_SLOWDOWN: u64 = 0x20;
    pub const HW_THERMAL_SLOWDOWN: u64 = 0x40;
    pub const HW_POWER_BRAKE: u64 = 0x80;
}

/// `realistic` here gives every fake a real driver's latencies, the fakes of the programs a
/// test starts included (they read it at their first `nvmlInit`): helpers that clear
/// gpuspan's variables for a child keep this one.
pub const LATENCY_VAR: &str = "GPUSPAN_TEST_FAKE_LATENCY";

/// The process list the NVML wrapper calls (`Device::running_compute_processes`).
pub const PROCESS_LIST: &str = "nvmlDeviceGetComputeRunningProcesses_v3";

/// NVML return codes (`nvmlReturn_t`), for [`FakeNvml::set_error`](super::FakeNvml::set_error).
pub mod code {
    pub const SUCCESS: i32 = 0;
    pub const NOT_SUPPORTED: i32 = 3;
    pub const DRIVER_NOT_LOADED: i32 = 9;
    pub const GPU_IS_LOST: i32 = 15;
    pub const UNKNOWN: i32 = 999;
}

/// The name every fake device reports unless `set_name` changes it.
pub const DEVICE_NAME: &str = "NVIDIA H200 (fake)";

/// The UUID the fake reports for the device at `index`.
pub fn uuid_of(index: u32) -> String {
    format!("GPU-00000000-0000-0000-0000-{index:012}")
}

/// The UUID the fake reports for MIG instance `mig` of GPU `index`.
pub fn mig_uuid_of(index: u32, mig: u32) -> String {
    format!("MIG-00000000-0000-0000-{index:04}-{mig:012}")
}

// A test binary of its own: it sets variables that every fake driver in the process reads.
//! The fake `libnvidia-ml.so.1` in `tests/fake_nvml` answers the real
//! `nvml-wrapper` with exactly the state its control functions set.

mod devices_and_their_memory_read_as_set;
mod power_energy_and_clocks_follow_the_script;
mod process_queries_and_injected_failures_answer_as_nvml_does;
mod state_moves_over_time_and_across_threads;
mod the_environment_and_mig_configure_the_fake;

use gpuspan_test_support as support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::Nvml;

use support::fake_nvml::{
    code, mig_uuid_of, reason, uuid_of, FakeNvml, DEFAULT_POWER_MW, DEFAULT_TOTAL, DEFAULT_USED,
    DEVICE_NAME, DRIVER_VERSION, ENERGY_BASE_MJ, ENERGY_QUANTUM, MIB, NO_PROCESS_QUERIES,
};

const GIB: u64 = 1024 * MIB;

fn init(fake: &FakeNvml) -> Nvml {
    Nvml::builder()
        .lib_path(fake.lib_path())
        .init()
        .expect("nvml-wrapper initialises on the fake library")
}

/// The `version` nvml-wrapper puts in `nvmlMemory_v2_t`:
/// `sizeof(nvmlMemory_v2_t) | 2 << 24`, with a 40-byte struct.
const MEMORY_V2_VERSION: u32 = 40 | (2 << 24);

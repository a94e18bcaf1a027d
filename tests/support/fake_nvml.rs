//! A fake `libnvidia-ml.so.1` for tests, read through the real `nvml-wrapper`.
//!
//! [`FakeNvml::build`] compiles `tests/fake_nvml/fake_nvml.c` with the system
//! `cc` (once per variant per test process) and copies the result into a
//! fresh temporary directory as `libnvidia-ml.so.1`. Each instance is a
//! separate file, so each is a separate `dlopen` with its own state: parallel
//! tests never share a fake GPU.
//!
//! The control functions are called through `libloading` on the same path
//! that NVML users load ([`FakeNvml::path`]); `dlopen` of one path returns
//! one handle, so they act on exactly the instance `nvml-wrapper` reads.
//!
//! The path is only valid while its `FakeNvml` is alive: dropping it deletes
//! the temporary directory. Initialise NVML (or start a subprocess that does)
//! before the `FakeNvml` is dropped; an `Nvml` that already loaded the
//! library keeps working after that.
//!
//! Creating a `FakeNvml` resets the library to its defaults and makes it
//! ignore the `FAKE_NVML_*` environment variables, so in-process tests do not
//! depend on the environment; call [`FakeNvml::load_env`] to read them. A
//! subprocess that loads [`FakeNvml::path`] itself reads them at `nvmlInit`.
//!
//! Defaults: 1 device named `NVIDIA H200 (fake)`, UUID
//! `GPU-00000000-0000-0000-0000-00000000000N` (N = index, 12 decimal
//! digits), 143771 MiB total, 1024 MiB used, utilisation 0/0, no processes,
//! driver version `570.86.15`, 300 W drawn (an energy counter at 5,000,000 mJ that moves
//! every 100 ms), no clock event reasons, an SM clock of 1980 MHz.
//!
//! Every call answers at once unless a latency is set ([`FakeNvml::set_latency`],
//! [`FakeNvml::set_realistic_latencies`]). With `GPUSPAN_TEST_FAKE_LATENCY=realistic` in
//! the environment, every fake starts with a real driver's latencies, in the test process
//! and in the programs it starts, to see how any test fares against a driver that costs
//! what a real one costs.

use std::ffi::{c_char, c_int, c_uint, c_ulonglong, CString, OsStr};
use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

mod compile;
use compile::compiled_library;

mod defaults;
pub use defaults::*;

/// A private copy of the fake NVML library, with its own state.
///
/// Dropping it unloads the control handle and deletes the copy; see the
/// module documentation for what that means for [`FakeNvml::path`].
#[derive(Debug)]
pub struct FakeNvml {
    // Declared before `_dir` so the library is closed before its file goes.
    lib: libloading::Library,
    path: PathBuf,
    _dir: tempfile::TempDir,
}

impl FakeNvml {
    /// A fresh fake with default state.
    pub fn build() -> FakeNvml {
        FakeNvml::build_variant(&[])
    }

    /// A fresh fake compiled with the given C defines (`NAME` or
    /// `NAME=VALUE`), e.g. `&[NO_PROCESS_QUERIES]`.
    pub fn build_variant(defines: &[&str]) -> FakeNvml {
        let compiled = compiled_library(defines);
        let dir = tempfile::Builder::new()
            .prefix("fake-nvml-")
            .tempdir()
            .expect("creating a temporary directory for the fake NVML library");
        let path = dir.path().join("libnvidia-ml.so.1");
        fs::copy(&compiled, &path).unwrap_or_else(|e| {
            panic!("copying {} to {}: {e}", compiled.display(), path.display())
        });
        // SAFETY: the library is our own C file; loading it runs no
        // initialisers beyond libc's.
        let lib = unsafe { libloading::Library::new(&path) }
            .unwrap_or_else(|e| panic!("loading the fake NVML library {}: {e}", path.display()));
        let fake = FakeNvml {
            lib,
            path,
            _dir: dir,
        };
        fake.reset();
        if std::env::var(LATENCY_VAR).as_deref() == Ok("realistic") {
            fake.set_realistic_latencies();
        }
        fake
    }

    /// The per-instance `libnvidia-ml.so.1`, for `Nvml::builder().lib_path`
    /// or `GPUSPAN_NVML_LIB`. Valid while `self` lives.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// [`FakeNvml::path`] as an `OsStr`, the type `NvmlBuilder::lib_path` takes.
    pub fn lib_path(&self) -> &OsStr {
        self.path.as_os_str()
    }

    /// Back to the defaults: 1 device, no processes, errors, timelines or
    /// call counts.
    fn reset(&self) {
        unsafe { self.sym::<unsafe extern "C" fn()>("fake_nvml_reset")() }
    }

    /// Reads the `FAKE_NVML_*` environment variables now, over the current
    /// state (the timeline clock restarts).
    pub fn load_env(&self) {
        unsafe { self.sym::<unsafe extern "C" fn()>("fake_nvml_load_env")() }
    }

    /// How many devices `nvmlDeviceGetCount_v2` reports (0 to 16, the fake's limit).
    pub fn set_device_count(&self, count: u32) {
        let rc = unsafe {
            self.sym::<unsafe extern "C" fn(c_uint) -> c_int>("fake_nvml_set_device_count")(count)
        };
        assert_eq!(rc, 0, "fake NVML: bad device count {count}");
    }

    /// Used and total memory of `dev`, in bytes; free is `total - used`.
    pub fn set_memory(&self, dev: u32, used: u64, total: u64) {
        let rc = unsafe {
            self.sym::<unsafe extern "C" fn(c_uint, c_ulonglong, c_ulonglong) -> c_int>(
                "fake_nvml_set_memory",
            )(dev, used, total)
        };
        assert_eq!(rc, 0, "fake NVML: bad device {dev}");
    }

    /// Utilisation rates of `dev`, in percent.
    pub fn set_utilization(&self, dev: u32, gpu: u32, memory: u32) {
        let rc = unsafe {
            self.sym::<unsafe extern "C" fn(c_uint, c_uint, c_uint) -> c_int>(
                "fake_nvml_set_utilization",
            )(dev, gpu, memory)
        };
        assert_eq!(rc, 0, "fake NVML: bad device {dev}");
    }

    /// The name of `dev` (under 96 bytes).
    pub fn set_name(&self, dev: u32, name: &str) {
        let name = CString::new(name).expect("device name without NUL");
        let rc = unsafe {
            self.sym::<unsafe extern "C" fn(c_uint, *const c_char) -> c_int>("fake_nvml_set_name")(
                dev,
                name.as_ptr(),
            )
        };
        assert_eq!(rc, 0, "fake NVML: bad device {dev} or name too long");
    }

    /// Compute processes of `dev` as `(pid, used bytes)`; `u64::MAX` as
    /// used memory reads as "not available". An empty slice clears them.
    pub fn set_processes(&self, dev: u32, processes: &[(u32, u64)]) {
        self.set_process_list("fake_nvml_set_processes", dev, processes);
    }

    /// Graphics processes of `dev`, like [`FakeNvml::set_processes`].
    pub fn set_graphics_processes(&self, dev: u32, processes: &[(u32, u64)]) {
        self.set_process_list("fake_nvml_set_graphics_processes", dev, processes);
    }

    /// Turns per-process accounting of `dev` on or off (off by default, as on most
    /// machines).
    pub fn set_accounting(&self, dev: u32, enabled: bool) {
        let rc = unsafe {
            self.sym::<unsafe extern "C" fn(c_uint, c_int) -> c_int>("fake_nvml_set_accounting")(
                dev,
                c_int::from(enabled),
            )
        };
        assert_eq!(rc, 0, "fake NVML: bad device {dev}");
    }

    /// The peak the driver's accounting reports for `pid` on `dev`, as a driver that saw
    /// an allocation between two process lists would.
    pub fn set_accounted_peak(&self, dev: u32, pid: u32, bytes: u64) {
        let rc = unsafe {
            self.sym::<unsafe extern "C" fn(c_uint, c_uint, c_ulonglong) -> c_int>(
                "fake_nvml_set_accounted_peak",
            )(dev, pid, bytes)
        };
        assert_eq!(
            rc, 0,
            "fake NVML: bad device {dev} or a full accounting table"
        );
    }

    fn set_process_list(&self, function: &str, dev: u32, processes: &[(u32, u64)]) {
        let pids: Vec<c_uint> = processes.iter().map(|p| p.0).collect();
        let used: Vec<c_ulonglong> = processes.iter().map(|p| p.1).collect();
        let count = c_uint::try_from(processes.len()).expect("process count fits in u32");
        let rc = unsafe {
            self.sym::<unsafe extern "C" fn(c_uint, *const c_uint, *const c_ulonglong, c_uint) -> c_int>(
                function,
            )(dev, pids.as_ptr(), used.as_ptr(), count)
        };
        assert_eq!(rc, 0, "fake NVML: bad device {dev} or over 256 processes");
    }

    /// Makes the NVML function `function` return `code` on device `dev`
    /// (`None`: every device, and the calls that take no device, such as
    /// `nvmlInit_v2`). [`code::SUCCESS`] removes the entry. Works before
    /// NVML is initialised. An error for `nvmlInit_v2` also fails
    /// `nvmlInitWithFlags`, one for `nvmlDeviceGetMemoryInfo` also fails
    /// `nvmlDeviceGetMemoryInfo_v2` (what `Device::memory_info` calls).
    pub fn set_error(&self, function: &str, dev: Option<u32>, code: i32) {
        self.assert_known(function);
        let name = CString::new(function).expect("function name without NUL");
        let dev = match dev {
            Some(d) => c_int::try_from(d).expect("device index fits in i32"),
            None => -1,
        };
        let rc = unsafe {
            self.sym::<unsafe extern "C" fn(*const c_char, c_int, c_int) -> c_int>(
                "fake_nvml_set_error",
            )(name.as_ptr(), dev, code)
        };
        assert_eq!(rc, 0, "fake NVML: could not set an error for {function}");
    }

    /// Removes every injected error.
    pub fn clear_errors(&self) {
        unsafe { self.sym::<unsafe extern "C" fn()>("fake_nvml_clear_errors")() }
    }

    /// How many times the NVML function `function` has been called, failed
    /// calls included. Panics on a name the fake does not implement.
    pub fn call_count(&self, function: &str) -> u64 {
        self.assert_known(function);
        let name = CString::new(function).expect("function name without NUL");
        unsafe {
            self.sym::<unsafe extern "C" fn(*const c_char) -> c_ulonglong>("fake_nvml_call_count")(
                name.as_ptr(),
            )
        }
    }

    /// Scripted used memory of `dev`: a read returns the `used` of the point
    /// with the latest offset at or before the time since the timeline clock
    /// started ([`FakeNvml::start_timeline`], or the creation of `self`).
    /// Before the first point, the value of [`FakeNvml::set_memory`]
    /// applies. An empty slice clears the timeline.
    pub fn set_timeline(&self, dev: u32, points: &[(Duration, u64)]) {
        let at: Vec<c_ulonglong> = points
            .iter()
            .map(|p| u64::try_from(p.0.as_nanos()).unwrap_or(u64::MAX))
            .collect();
        let used: Vec<c_ulonglong> = points.iter().map(|p| p.1).collect();
        let count = c_uint::try_from(points.len()).expect("timeline length fits in u32");
        let rc = unsafe {
            self.sym::<unsafe extern "C" fn(
                c_uint,
                *const c_ulonglong,
                *const c_ulonglong,
                c_uint,
            ) -> c_int>("fake_nvml_set_timeline")(dev, at.as_ptr(), used.as_ptr(), count)
        };
        assert_eq!(rc, 0, "fake NVML: bad device {dev}");
    }

    /// (Re)starts the clock shared by the timelines of all devices.
    pub fn start_timeline(&self) {
        unsafe { self.sym::<unsafe extern "C" fn()>("fake_nvml_start_timeline")() }
    }

    /// Puts GPU `dev` in MIG mode with `count` instances (at most 7) of `total` bytes
    /// each; their used memory starts at [`DEFAULT_USED`]. Instance `m` is then the
    /// device [`FakeNvml::mig_slot`]`(dev, m)` for every per-device function.
    pub fn set_mig(&self, dev: u32, count: u32, total: u64) {
        let count = c_int::try_from(count).unwrap_or(c_int::MAX);
        let rc = unsafe {
            self.sym::<unsafe extern "C" fn(c_uint, c_int, u64) -> c_int>("fake_nvml_set_mig")(
                dev, count, total,
            )
        };
        assert_eq!(
            rc, 0,
            "fake NVML: bad GPU {dev} or more than 7 MIG instances"
        );
    }

    /// The device number of MIG instance `mig` of GPU `dev`, for [`FakeNvml::set_memory`],
    /// [`FakeNvml::set_processes`], [`FakeNvml::set_timeline`], [`FakeNvml::set_error`]...
    pub fn mig_slot(&self, dev: u32, mig: u32) -> u32 {
        unsafe {
            self.sym::<unsafe extern "C" fn(c_uint, c_uint) -> c_uint>("fake_nvml_mig_slot")(
                dev, mig,
            )
        }
    }

    /// Makes every call of the per-device NVML function `function` take `latency`
    /// (zero: none), inside the call, as a real driver's does. The process lists hold
    /// the fake's driver lock meanwhile ([`FakeNvml::driver_lock_held`]).
    pub fn set_latency(&self, function: &str, latency: Duration) {
        self.assert_known(function);
        let name = CString::new(function).expect("function name without NUL");
        let us = c_uint::try_from(latency.as_micros()).unwrap_or(c_uint::MAX);
        let rc = unsafe {
            self.sym::<unsafe extern "C" fn(*const c_char, c_uint) -> c_int>(
                "fake_nvml_set_latency",
            )(name.as_ptr(), us)
        };
        assert_eq!(rc, 0, "fake NVML: could not set a latency for {function}");
    }

    /// Every call costs what it costs on a real driver: a memory read about 12 µs,
    /// utilization about 20 µs, a process list 4.5 ms holding the driver's lock (the
    /// fake's `k_realistic`).
    pub fn set_realistic_latencies(&self) {
        unsafe { self.sym::<unsafe extern "C" fn()>("fake_nvml_set_realistic_latencies")() }
    }

    /// How long the process lists have held the fake's driver lock, in all.
    pub fn driver_lock_held(&self) -> Duration {
        Duration::from_nanos(unsafe {
            self.sym::<unsafe extern "C" fn() -> c_ulonglong>("fake_nvml_driver_lock_held_ns")()
        })
    }

    /// Makes every memory read block for `hang` before it starts (zero: none), as a driver
    /// call on a lost GPU can.
    pub fn set_hang(&self, hang: Duration) {
        let ms = c_uint::try_from(hang.as_millis()).unwrap_or(c_uint::MAX);
        unsafe { self.sym::<unsafe extern "C" fn(c_uint)>("fake_nvml_set_hang")(ms) };
    }

    /// When enabled, used memory of `dev` is its set used memory plus the
    /// resident set size of the process that reads it.
    pub fn set_follow_rss(&self, dev: u32, enabled: bool) {
        let rc = unsafe {
            self.sym::<unsafe extern "C" fn(c_uint, c_int) -> c_int>("fake_nvml_set_follow_rss")(
                dev,
                c_int::from(enabled),
            )
        };
        assert_eq!(rc, 0, "fake NVML: bad device {dev}");
    }

    /// `nvmlInit` calls not yet matched by `nvmlShutdown` (0 once every
    /// `Nvml` on this library has been dropped or shut down).
    pub fn init_count(&self) -> u32 {
        unsafe { self.sym::<unsafe extern "C" fn() -> c_uint>("fake_nvml_init_count")() }
    }

    /// The used memory a read of `dev` would report now (timeline and RSS
    /// included), without counting as a call.
    pub fn current_used(&self, dev: u32) -> u64 {
        unsafe {
            self.sym::<unsafe extern "C" fn(c_uint) -> c_ulonglong>("fake_nvml_current_used")(dev)
        }
    }

    /// `dev` draws `milliwatts` from now on (before its power timeline's first point).
    pub fn set_power(&self, dev: u32, milliwatts: u64) {
        let rc = unsafe {
            self.sym::<unsafe extern "C" fn(c_uint, c_ulonglong) -> c_int>("fake_nvml_set_power")(
                dev, milliwatts,
            )
        };
        assert_eq!(rc, 0, "fake NVML: bad device {dev}");
    }

    /// Scripted power of `dev`, in milliwatts: a read returns the point with the latest
    /// offset at or before [`FakeNvml::power_clock`]; the energy counter integrates it. An
    /// empty slice clears the timeline.
    pub fn set_power_timeline(&self, dev: u32, points: &[(Duration, u64)]) {
        let at: Vec<c_ulonglong> = points
            .iter()
            .map(|p| u64::try_from(p.0.as_nanos()).unwrap_or(u64::MAX))
            .collect();
        let milliwatts: Vec<c_ulonglong> = points.iter().map(|p| p.1).collect();
        let count = c_uint::try_from(points.len()).expect("timeline length fits in u32");
        let rc = unsafe {
            self.sym::<unsafe extern "C" fn(
                c_uint,
                *const c_ulonglong,
                *const c_ulonglong,
                c_uint,
            ) -> c_int>("fake_nvml_set_power_timeline")(
                dev,
                at.as_ptr(),
                milliwatts.as_ptr(),
                count,
            )
        };
        assert_eq!(rc, 0, "fake NVML: bad device {dev}");
    }

    /// The power clock: the power timelines' offsets and the energy counter's 100 ms
    /// quanta count from its zero (the creation of `self`; never restarted).
    pub fn power_clock(&self) -> Duration {
        Duration::from_nanos(unsafe {
            self.sym::<unsafe extern "C" fn() -> c_ulonglong>("fake_nvml_power_clock_ns")()
        })
    }

    /// What `nvmlDeviceGetTotalEnergyConsumption` of `dev` reports now, in millijoules,
    /// without counting as a call.
    pub fn current_energy(&self, dev: u32) -> u64 {
        unsafe {
            self.sym::<unsafe extern "C" fn(c_uint) -> c_ulonglong>("fake_nvml_current_energy")(dev)
        }
    }

    /// A driver reload: every energy counter starts again from zero now.
    pub fn reload_driver(&self) {
        unsafe { self.sym::<unsafe extern "C" fn()>("fake_nvml_reload_driver")() }
    }

    /// The clock event reasons `dev` reports (NVML's `nvmlClocksEventReason*` bits).
    pub fn set_clocks_event_reasons(&self, dev: u32, reasons: u64) {
        let rc = unsafe {
            self.sym::<unsafe extern "C" fn(c_uint, c_ulonglong) -> c_int>(
                "fake_nvml_set_clocks_event_reasons",
            )(dev, reasons)
        };
        assert_eq!(rc, 0, "fake NVML: bad device {dev}");
    }

    /// The SM clock `dev` reports, in MHz.
    pub fn set_sm_clock(&self, dev: u32, mhz: u32) {
        let rc = unsafe {
            self.sym::<unsafe extern "C" fn(c_uint, c_uint) -> c_int>("fake_nvml_set_sm_clock")(
                dev, mhz,
            )
        };
        assert_eq!(rc, 0, "fake NVML: bad device {dev}");
    }

    fn assert_known(&self, function: &str) {
        let name = CString::new(function).expect("function name without NUL");
        let known = unsafe {
            self.sym::<unsafe extern "C" fn(*const c_char) -> c_int>("fake_nvml_knows_function")(
                name.as_ptr(),
            )
        };
        assert!(
            known != 0,
            "the fake NVML library does not implement a function named {function:?}"
        );
    }

    /// A control function of this instance.
    ///
    /// # Safety
    /// `T` must be the C signature of `name` in `fake_nvml.c`.
    unsafe fn sym<T>(&self, name: &str) -> libloading::Symbol<'_, T> {
        unsafe { self.lib.get::<T>(name.as_bytes()) }.unwrap_or_else(|e| {
            panic!(
                "the fake NVML library {} lacks {name}: {e}",
                self.path.display()
            )
        })
    }
}

//! `gpuspan selftest`: the peak, proved on the user's own GPUs. On each device in scope it
//! creates a CUDA context, opens a span, allocates a known amount through the CUDA driver
//! (cudarc, `libcuda` loaded at run time), holds it long enough for the device reads and
//! the process lists to see it, frees it, and closes the span; then it reads the spans back
//! from a run directory, as a user's run would be read, and checks that each span's peak
//! and this process's figures rose by the allocation, to within the driver's granularity.
//! It also reports what the driver's calls cost and how well the sampler kept its cadence.
//!
//! AMD and Intel GPUs are read from the kernel's files, and CUDA does not reach them: the
//! selftest says so, with what those files say now, and proves nothing there.

use std::fmt::Write as _;
use std::path::Path;
use std::time::Duration;

use cudarc::driver::{result, sys, DriverError};

use crate::util;
use gpuspan::runlog::{GpuId, SpanRecord};
use table::mib;

mod table;

/// The driver rounds allocations up to this (2 MiB pages): a rise this much short of the
/// allocation still counts.
const GRANULARITY: u64 = 2 << 20;

/// The spans of each device's test: an allocation held, then a two-interval spike.
const HELD: &str = "selftest";
const SPIKE: &str = "selftest_spike";

/// The test's spans read back, each list in the devices' order.
struct Spans {
    held: Vec<SpanRecord>,
    spikes: Vec<SpanRecord>,
}

/// What to allocate and how often to sample.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Options {
    /// Bytes allocated on each device (at most half of what is free there).
    pub(crate) bytes: u64,
    pub(crate) interval: Duration,
}

/// Why the selftest could not run at all (as opposed to a check that failed).
#[derive(Debug, thiserror::Error)]
pub(crate) enum SelftestError {
    #[error(
        "the CUDA driver library (libcuda.so) could not be loaded: this machine has no NVIDIA \
         driver, or its library is not on the loader's path (LD_LIBRARY_PATH)"
    )]
    NoCuda,
    #[error("no GPU to test: {0}")]
    NoGpu(String),
    #[error("no device it can test through CUDA ({cuda}); {note}")]
    KernelFilesOnly { cuda: String, note: String },
    #[error("the CUDA driver failed to {what}: {source:?}")]
    Cuda {
        what: &'static str,
        source: DriverError,
    },
    #[error(transparent)]
    Init(#[from] gpuspan::InitError),
    #[error(transparent)]
    Shutdown(#[from] gpuspan::ShutdownError),
    #[error("cannot read the test's spans back: {0}")]
    ReadBack(#[from] std::io::Error),
}

/// What the selftest found: the table to print, and whether every check passed.
#[derive(Debug)]
pub(crate) struct Outcome {
    pub(crate) table: String,
    pub(crate) passed: bool,
}

/// One device's test, before its span is read back.
struct Tested {
    id: GpuId,
    name: String,
    context: Option<u64>,
    /// Bytes allocated and held, or why nothing could be.
    allocated: Result<u64, String>,
    /// Bytes allocated for two sampling intervals.
    spike: Result<u64, String>,
}

/// Allocates `size` bytes in the current context, holds them for `hold` and frees them;
/// the size, or why nothing could be allocated.
fn hold_allocation(size: u64, hold: Duration) -> Result<Result<u64, String>, SelftestError> {
    // SAFETY: a plain allocation in the current context, freed below.
    match unsafe { result::malloc_sync(usize::try_from(size).unwrap_or(usize::MAX)) } {
        Ok(pointer) => {
            std::thread::sleep(hold);
            // SAFETY: allocated above and not used since.
            cuda("free an allocation", unsafe { result::free_sync(pointer) })?;
            Ok(Ok(size))
        }
        Err(e) => Ok(Err(format!(
            "could not allocate {}: {e:?}",
            util::mib(size as f64, 0)
        ))),
    }
}

fn cuda<T>(what: &'static str, call: Result<T, DriverError>) -> Result<T, SelftestError> {
    call.map_err(|source| SelftestError::Cuda { what, source })
}

/// Runs the selftest, writing its spans to a run directory under `scratch`.
pub(crate) fn run(options: Options, scratch: &Path) -> Result<Outcome, SelftestError> {
    let telemetry = gpuspan::Telemetry::builder()
        .run_dir(scratch)
        .run_id("selftest")
        .traces_exporter(gpuspan::settings::Exporter::RunDir)
        .metrics_exporter(gpuspan::settings::Exporter::None)
        .sample_interval(options.interval)
        .summary(false)
        .timeline(false)
        .install()?;
    let source = telemetry.memory_source().unwrap_or("nothing").to_owned();
    // SAFETY: only tries to open the library; no symbol of it is called.
    let cuda_present = unsafe { sys::is_culib_present() };
    if !cuda_present || !source.starts_with("nvml") {
        // Past the sampler's first reads, for the figures the note shows.
        std::thread::sleep(options.interval * 4);
        let note = kernel_files_note(&telemetry.devices(), &source);
        let cuda = match (cuda_present, &note) {
            (false, None) => return Err(SelftestError::NoCuda),
            (false, Some(_)) => SelftestError::NoCuda.to_string(),
            (true, None) => {
                return Err(SelftestError::NoGpu(format!(
                    "gpuspan reads memory through {source}, not NVML (is the NVIDIA driver \
                     installed?)"
                )))
            }
            (true, Some(_)) => "gpuspan reads no NVIDIA GPU through NVML".to_owned(),
        };
        let note = note.unwrap_or_default();
        return Err(SelftestError::KernelFilesOnly { cuda, note });
    }
    let devices = telemetry.devices();
    if devices.is_empty() {
        return Err(SelftestError::NoGpu(
            "NVML lists no device in scope (GPUSPAN_DEVICES, CUDA_VISIBLE_DEVICES)".into(),
        ));
    }
    cuda("start", result::init())?;
    let count = cuda("count its devices", result::device::get_count())?;
    let settle = || std::thread::sleep(options.interval * 3);
    // Process lists run on a slower cadence of their own, one device at a time, and a span
    // carries their sum over the devices: every device is listed again (twice) before a
    // test starts and while an allocation is held, so the sum moves only with this test.
    let lists = || {
        let every = telemetry
            .sampler_stats()
            .and_then(|s| s.process_interval)
            .unwrap_or(options.interval);
        every * 2 + options.interval
    };
    let used = |position: usize| telemetry.devices().get(position).and_then(|d| d.used);
    let mut tested = Vec::new();
    for ordinal in 0..count {
        let device = cuda("open a device", result::device::get(ordinal))?;
        let uuid = uuid_string(&cuda("read a device's UUID", device_uuid(device))?);
        let Some(position) = devices
            .iter()
            .position(|d| uuid_body(&d.device.uuid) == uuid)
        else {
            continue;
        };
        let info = &devices[position].device;
        std::thread::sleep(lists());
        let before = used(position);
        // SAFETY: `device` came from the driver; the context is released below.
        let context = cuda("create a context", unsafe {
            result::primary_ctx::retain(device)
        })?;
        // SAFETY: the context was just retained.
        cuda("use the context", unsafe {
            result::ctx::set_current(context)
        })?;
        settle();
        let context_bytes = used(position).zip(before).map(|(a, b)| a.saturating_sub(b));
        let free = cuda("read free memory", result::mem_get_info())?.0 as u64;
        let size = options.bytes.min(free / 2);
        std::thread::sleep(lists());
        let hold = (options.interval * 4).max(lists());
        // Held long enough for the process lists to see it, in one span; then a spike of
        // two sampling intervals, the shortest the peak promises to catch, in another.
        let allocated = {
            let _span = gpuspan::memory_span!("selftest");
            settle();
            let allocated = hold_allocation(size, hold)?;
            settle();
            allocated
        };
        let spike = {
            let _span = gpuspan::memory_span!("selftest_spike");
            settle();
            let spike = hold_allocation(size, options.interval * 2)?;
            settle();
            spike
        };
        // SAFETY: retained above, once.
        cuda("release the context", unsafe {
            result::primary_ctx::release(device)
        })?;
        tested.push(Tested {
            id: info.id(),
            name: info.name.clone(),
            context: context_bytes,
            allocated,
            spike,
        });
    }
    let stats = telemetry.sampler_stats();
    let note = kernel_files_note(&telemetry.devices(), &source);
    telemetry.shutdown()?;
    let (mut held, mut spikes) = (Vec::new(), Vec::new());
    gpuspan::runlog::read_run_and(&scratch.join("selftest"), |record| {
        match record.name.as_str() {
            HELD => held.push(record),
            SPIKE => spikes.push(record),
            _ => {}
        }
    })?;
    held.sort_by_key(|r| r.start_unix_nanos);
    spikes.sort_by_key(|r| r.start_unix_nanos);
    let spans = Spans { held, spikes };
    let mut outcome = table::report(&tested, &spans, devices.len(), stats.as_ref(), options);
    if let Some(note) = note {
        outcome.table.push_str(&note);
        outcome.table.push('\n');
    }
    Ok(outcome)
}

/// What the selftest can say of the AMD and Intel devices in scope (read from the kernel's
/// files, which CUDA does not reach): that it proves nothing there, and what their files
/// say now; `None` without such a device.
fn kernel_files_note(devices: &[gpuspan::DeviceMemory], source: &str) -> Option<String> {
    let others: Vec<&gpuspan::DeviceMemory> = devices
        .iter()
        .filter(|d| d.device.vendor != "NVIDIA")
        .collect();
    if others.is_empty() {
        return None;
    }
    let files = source
        .split('+')
        .filter(|s| *s != "nvml")
        .collect::<Vec<_>>()
        .join("+");
    let mut note = format!(
        "{} AMD or Intel device(s) read from the kernel's files ({files}): the selftest \
         allocates through CUDA, which does not reach them, so it cannot prove there that a \
         span's peak holds an allocation or a two-interval spike, nor that this process's \
         figure rises with it; it shows only that their files read now:",
        others.len()
    );
    for d in others {
        let figure = |v: Option<u64>, none: &str| v.map_or(none.to_owned(), mib);
        let _ = write!(
            note,
            "\n{:>4}  {:<24} {}: {} used of {}",
            d.device.id().to_string(),
            d.device.name,
            d.device.uuid,
            figure(d.used, "nothing read"),
            figure(d.total, "no total"),
        );
    }
    Some(note)
}

/// The UUID of CUDA's device `device`: a MIG instance's own, as NVML spells it.
///
/// `cuDeviceGetUuid` (what cudarc's `get_uuid` calls) answers a MIG instance with the UUID
/// of the GPU that holds it; `cuDeviceGetUuid_v2` (CUDA 11.4 on) with the instance's own.
/// A driver older than that has no MIG instances as CUDA devices, so the first serves.
fn device_uuid(device: sys::CUdevice) -> Result<sys::CUuuid, DriverError> {
    type GetUuid = unsafe extern "C" fn(*mut sys::CUuuid, sys::CUdevice) -> sys::CUresult;
    // SAFETY: the library is loaded (cuInit ran); looking a symbol up calls nothing.
    let has_v2 = unsafe { sys::culib().get::<GetUuid>(b"cuDeviceGetUuid_v2\0") }.is_ok();
    if !has_v2 {
        return result::device::get_uuid(device);
    }
    let mut uuid = std::mem::MaybeUninit::<sys::CUuuid>::uninit();
    // SAFETY: the driver writes the 16 bytes of a device it gave us; read only on success.
    unsafe {
        sys::cuDeviceGetUuid_v2(uuid.as_mut_ptr(), device).result()?;
        Ok(uuid.assume_init())
    }
}

/// NVML's UUID of a device (`GPU-...`) or MIG instance (`MIG-...`) without its prefix, as
/// [`uuid_string`] spells CUDA's.
fn uuid_body(uuid: &str) -> String {
    uuid.split_once('-')
        .map_or(uuid, |(_, body)| body)
        .to_ascii_lowercase()
}

/// `xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`: CUDA's UUID of a device or MIG instance.
fn uuid_string(uuid: &sys::CUuuid) -> String {
    let hex: Vec<String> = uuid
        .bytes
        .iter()
        .map(|&b| format!("{:02x}", b as u8))
        .collect();
    format!(
        "{}-{}-{}-{}-{}",
        hex[0..4].concat(),
        hex[4..6].concat(),
        hex[6..8].concat(),
        hex[8..10].concat(),
        hex[10..16].concat()
    )
}

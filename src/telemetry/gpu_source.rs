//! Which GPU source a run reads: NVML for NVIDIA GPUs and the kernel's files for AMD and
//! Intel GPUs (both, on a machine with both, every device once), else `nvidia-smi`, else
//! none, with one clear warning. Never host memory under a GPU name.

use crate::config::Settings;
use crate::error::InitError;
use crate::source::combined::Combined;
use crate::source::drm::{DrmSource, NoDrmDevice};
#[cfg(feature = "nvml")]
use crate::source::nvml;
use crate::source::processes::ProcessTable;
use crate::source::scope::AmbiguousDevice;
use crate::source::smi;
use crate::source::MemorySource;

/// Opens the best source the machine has; `None` (with a warning) when there is none.
///
/// # Errors
/// A UUID prefix in the device scope that starts several devices' UUIDs, naming them.
pub(crate) fn open_gpu_source(
    settings: &Settings,
) -> Result<Option<Box<dyn MemorySource>>, InitError> {
    let why = match nvml_and_kernel_files(settings, None)? {
        Ok(source) => return Ok(Some(source)),
        Err(why) => why,
    };

    let program = settings
        .search_path
        .as_deref()
        .and_then(smi::find_nvidia_smi);
    if let Some(program) = program {
        match smi::SmiSource::open(&program, &settings.devices) {
            Ok(source) => {
                eprintln!(
                    "gpuspan: warning: {why}; reading GPU memory from {} instead, every {} ms, \
                     so spikes shorter than that may be missed",
                    program.display(),
                    smi::MIN_INTERVAL.as_millis()
                );
                return Ok(Some(Box::new(source)));
            }
            Err(smi) => eprintln!(
                "gpuspan: warning: no GPU memory source: {why}, and {} failed ({smi}); spans \
                 carry host memory (process.memory.*) only",
                program.display()
            ),
        }
        return Ok(None);
    }
    eprintln!(
        "gpuspan: warning: no GPU memory source: {why}; spans carry host memory \
         (process.memory.*) only. Set GPUSPAN_NVML_LIB to the driver's libnvidia-ml.so.1 if it \
         is installed elsewhere."
    );
    Ok(None)
}

/// NVML's devices, then the AMD and Intel devices of the kernel's files, as one source
/// where both have devices in scope. With `processes`, NVML's lists also keep every
/// process's memory there (incomplete where the kernel's files add devices, whose other
/// processes are not listed). `Ok(Err(..))`: why neither has a device, in words.
///
/// # Errors
/// A UUID prefix in the device scope that starts several devices' UUIDs, naming them.
pub(crate) fn nvml_and_kernel_files(
    settings: &Settings,
    processes: Option<ProcessTable>,
) -> Result<Result<Box<dyn MemorySource>, String>, InitError> {
    // AMD and Intel devices are numbered after every GPU NVML counts (in scope or not),
    // so every device has one index whatever the scope.
    #[cfg(feature = "nvml")]
    let nvml = match nvml::NvmlSource::open(settings.nvml_lib.as_deref(), &settings.devices) {
        Ok(source) => Ok(source),
        Err(nvml::NvmlUnavailable::Unavailable(why)) => Err(why),
        Err(nvml::NvmlUnavailable::Ambiguous(ambiguous)) => return Err(invalid(&ambiguous)),
    };
    #[cfg(feature = "nvml")]
    let first_index = nvml.as_ref().map_or(0, nvml::NvmlSource::count);
    #[cfg(not(feature = "nvml"))]
    let (nvml, first_index) = (
        Err::<Box<dyn MemorySource>, _>(
            "this build leaves out NVML (gpuspan's `nvml` feature)".to_owned(),
        ),
        0,
    );
    let drm = match DrmSource::open(&settings.roots, &settings.drm_devices, first_index) {
        Err(NoDrmDevice::Ambiguous(ambiguous)) => return Err(invalid(&ambiguous)),
        opened => opened,
    };
    #[cfg(feature = "nvml")]
    let nvml = nvml.map(|source| -> Box<dyn MemorySource> {
        match processes {
            Some(table) => Box::new(source.with_process_table(table, drm.is_ok())),
            None => Box::new(source),
        }
    });
    #[cfg(not(feature = "nvml"))]
    drop(processes);
    Ok(match (nvml, drm) {
        (Ok(nvml), Ok(drm)) if !nvml.devices().is_empty() => {
            Ok(Box::new(Combined::new(nvml, Box::new(drm))))
        }
        (_, Ok(drm)) => Ok(Box::new(drm)),
        (Ok(nvml), Err(_)) => Ok(nvml),
        (Err(nvml), Err(drm)) => Err(format!("{nvml}; {drm}")),
    })
}

/// An ambiguous UUID prefix as the error of the setting that gave it.
fn invalid(ambiguous: &AmbiguousDevice) -> InitError {
    InitError::InvalidSetting {
        name: crate::config::scope_setting(&ambiguous.entry).to_owned(),
        value: ambiguous.entry.clone(),
        expected: ambiguous.to_string(),
    }
}

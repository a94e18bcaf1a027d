//! Which GPU source a run reads: NVML, else `nvidia-smi`, else none, with one clear
//! warning. Never host memory under a GPU name.

use crate::config::Settings;
#[cfg(feature = "nvml")]
use crate::source::nvml;
use crate::source::smi;
use crate::source::MemorySource;

/// Opens the best source the machine has; `None` (with a warning) when there is none.
pub(crate) fn open_gpu_source(settings: &Settings) -> Option<Box<dyn MemorySource>> {
    #[cfg(feature = "nvml")]
    let why = match nvml::NvmlSource::open(settings.nvml_lib.as_deref(), &settings.devices) {
        Ok(source) => return Some(Box::new(source)),
        Err(why) => why.0,
    };
    #[cfg(not(feature = "nvml"))]
    let why = "this build leaves out NVML (gpuspan's `nvml` feature)".to_owned();

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
                return Some(Box::new(source));
            }
            Err(smi) => eprintln!(
                "gpuspan: warning: no GPU memory source: {why}, and {} failed ({smi}); spans \
                 carry host memory (process.memory.*) only",
                program.display()
            ),
        }
        return None;
    }
    eprintln!(
        "gpuspan: warning: no GPU memory source: {why}; spans carry host memory \
         (process.memory.*) only. Set GPUSPAN_NVML_LIB to the driver's libnvidia-ml.so.1 if it \
         is installed elsewhere."
    );
    None
}

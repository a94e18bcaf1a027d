//! Where memory readings come from.
//!
//! A [`MemorySource`] reads the GPU devices it knows about; the sampler thread calls it at
//! every interval and never from the training thread. Host memory (`host`) and the counters a
//! framework pushes (`allocator`) are read separately, so host memory can never end up under
//! a `gpu.` name.

pub(crate) mod combined;
pub(crate) mod drm;
pub(crate) mod host;
#[cfg(feature = "nvml")]
pub(crate) mod nvml;
#[cfg(test)]
mod parse_props;
#[cfg_attr(not(feature = "pipeline"), allow(dead_code))]
pub(crate) mod processes;
pub(crate) mod scope;
pub(crate) mod smi;

use std::time::Duration;

pub use crate::record::GpuId;
pub use scope::{DeviceScope, DeviceScopeError};

/// A GPU device as a source sees it: a whole GPU, or one MIG instance of a GPU in MIG
/// mode (each instance is a device of its own, with its own memory).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Device {
    /// The driver's index for the GPU (NVML index), recorded as `gpu.index`; for a MIG
    /// instance, its parent GPU's.
    pub index: u32,
    /// For a MIG instance, its index on the parent GPU, recorded as `gpu.mig.index`.
    pub mig: Option<u32>,
    /// A stable identifier, recorded as `hw.id` (for NVIDIA, the `GPU-...` UUID, or the
    /// instance's `MIG-...` UUID).
    pub uuid: String,
    /// The product name, recorded as `hw.name`.
    pub name: String,
    /// The vendor, recorded as `hw.vendor`.
    pub vendor: String,
}

impl Device {
    /// The device's identity in per-device keys (`gpu.0.memory.peak`, `gpu.0.mig1.memory.peak`).
    pub fn id(&self) -> GpuId {
        GpuId {
            index: self.index,
            mig: self.mig,
        }
    }
}

/// One reading of one device. `None` means "not measured", never zero.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DeviceReading {
    /// Device memory in use, in bytes (NVML `used`).
    pub used: Option<u64>,
    /// Device memory installed, in bytes.
    pub total: Option<u64>,
    /// Fraction of time the GPU was busy over the driver's last sample period (0 to 1).
    pub utilization: Option<f64>,
    /// GPU memory held by this process on the device, in bytes, where the driver reports it.
    pub process_used: Option<u64>,
    /// Why the device could not be read this time (for example "GPU is lost").
    pub error: Option<String>,
}

/// One reading of a device's energy, power and clocks, taken at the power cadence (slower
/// than memory's). `None` means "not measured", never zero.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PowerReading {
    /// The device's energy counter, in microjoules since the driver loaded (NVML's total
    /// energy, counted in millijoules; hwmon's `energy1_input`). It goes back only when
    /// the driver reloads.
    pub energy_uj: Option<u64>,
    /// The power drawn now, in milliwatts.
    pub power_mw: Option<u64>,
    /// Why the clocks are held down now: NVML's clock event reason bits
    /// (`nvmlClocksEventReason*`).
    pub clock_reasons: Option<u64>,
    /// The SM clock now, in MHz.
    pub sm_clock_mhz: Option<u64>,
}

/// Something that reads GPU memory: NVML, `nvidia-smi`, or your own.
///
/// The sampler thread owns the source and calls [`read`](MemorySource::read) at every
/// sampling interval; a read should take microseconds, not milliseconds. A source reports
/// failures per device through [`DeviceReading::error`] and must not panic.
pub trait MemorySource: Send + 'static {
    /// The name recorded as `gpu.memory.source` (`nvml`, `nvidia-smi`, ...).
    fn name(&self) -> &str;

    /// The devices this source reads, in the order [`read`](MemorySource::read) fills them.
    fn devices(&self) -> &[Device];

    /// Reads every device into `out`, which has one entry per device.
    fn read(&mut self, out: &mut [DeviceReading]);

    /// The shortest interval this source should be read at, when it is slower than the
    /// sampler's (an external command, for example).
    fn min_interval(&self) -> Option<Duration> {
        None
    }

    /// Hands this process's per-device memory over to a [`ProcessLister`], when listing
    /// processes costs far more than reading device memory (NVML's lists take milliseconds
    /// and hold the driver's lock). The sampler then calls the lister on a cadence of its
    /// own and [`read`](MemorySource::read) leaves [`DeviceReading::process_used`] unset.
    /// Called once, before the first read.
    fn process_lister(&mut self) -> Option<Box<dyn ProcessLister>> {
        None
    }

    /// Reads every device's energy counter, power and clocks into `out` (one entry per
    /// device), at the sampler's power cadence. A device whose figures another device of
    /// the list already gave (a second MIG instance of one GPU) leaves them unset, so that
    /// sums count each board once. By default nothing is read.
    fn read_power(&mut self, _out: &mut [PowerReading]) {}

    /// What the energy figures cover when it is more than the devices themselves: `gpu`
    /// when a device is a MIG instance (the counter is the whole GPU's), `socket` for an
    /// APU whose figure includes the CPU (the wider of the two when both are read).
    /// `None`: the devices, exactly.
    fn energy_scope(&self) -> Option<&'static str> {
        None
    }

    /// Time the latest [`read`](MemorySource::read) spent reading utilization, when it read
    /// it (the sampler reports it apart from the memory reads in its own metrics).
    fn take_utilization_time(&mut self) -> Option<Duration> {
        None
    }
}

/// The interval `source` is read at when `asked` for: never shorter than the source's own
/// [`min_interval`](MemorySource::min_interval). The sampler and the timeline file both
/// take it from here.
pub(crate) fn read_interval(source: Option<&dyn MemorySource>, asked: Duration) -> Duration {
    match source.and_then(|s| s.min_interval()) {
        Some(min) => asked.max(min),
        None => asked,
    }
}

/// Lists the processes of one device at a time, for [`MemorySource::process_lister`].
///
/// The sampler calls it from its thread while lists are cheap and from a thread of its
/// own (`gpuspan-procs`) once they are not, never from two threads at once.
pub trait ProcessLister: Send + 'static {
    /// This process's memory on the device at `position` (in the source's
    /// [`devices`](MemorySource::devices) order), in bytes; `None` when the driver cannot
    /// say.
    fn list(&mut self, position: usize) -> Option<u64>;

    /// The driver's own record of the most memory this process held on the device at
    /// `position`, where it keeps one (NVML's accounting mode). The sampler asks once, as
    /// the run ends, to check the peak its lists saw against the driver's.
    fn driver_peak(&mut self, _position: usize) -> DriverPeak {
        DriverPeak::Unsupported
    }
}

/// What the driver says of a process's peak memory on one device.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DriverPeak {
    /// The most memory the process held, in bytes, by the driver's count.
    Peak(u64),
    /// Accounting is on, but the driver has no figure for this process.
    NoRecord,
    /// The driver can keep accounting and it is off.
    Off,
    /// The driver keeps no accounting for this device.
    Unsupported,
    /// Asking failed.
    Failed(String),
}

/// A boxed source is a source, so a source chosen at run time can be handed on as one.
impl MemorySource for Box<dyn MemorySource> {
    fn name(&self) -> &str {
        (**self).name()
    }

    fn devices(&self) -> &[Device] {
        (**self).devices()
    }

    fn read(&mut self, out: &mut [DeviceReading]) {
        (**self).read(out);
    }

    fn min_interval(&self) -> Option<Duration> {
        (**self).min_interval()
    }

    fn process_lister(&mut self) -> Option<Box<dyn ProcessLister>> {
        (**self).process_lister()
    }

    fn read_power(&mut self, out: &mut [PowerReading]) {
        (**self).read_power(out);
    }

    fn energy_scope(&self) -> Option<&'static str> {
        (**self).energy_scope()
    }

    fn take_utilization_time(&mut self) -> Option<Duration> {
        (**self).take_utilization_time()
    }
}

impl std::fmt::Debug for dyn MemorySource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemorySource")
            .field("name", &self.name())
            .field("devices", &self.devices())
            .finish()
    }
}

//! A closed span as gpuspan reads it: the one view of a span that the summary table,
//! `gpuspan report`, diagnosis, the taps and the pictures share.
//!
//! Plain data with no imports from the crate: the ground floor. How a record is read from a
//! span's attributes lives with the attribute table (`figures`); a device's id ([`GpuId`])
//! is here because every floor above names devices by it.

/// Start, peak and end of one memory figure over a span or an epoch, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Memory {
    /// At the start.
    pub start: i64,
    /// Highest while it was open.
    pub peak: i64,
    /// At its end.
    pub end: i64,
}

/// What kind of span this is, from its name and index attribute.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Role {
    /// An `epoch` span with its `ml.epoch` (-1 when it has none).
    Epoch(i64),
    /// A `step` span with its `ml.step` (-1 when it has none).
    Step(i64),
    /// Any other span.
    Other,
}

/// Which device a figure belongs to: a GPU by its NVML index, or one MIG instance of it.
///
/// Written `0` for GPU 0 and `0.mig1` for MIG instance 1 of GPU 0, as in the keys
/// `gpu.0.memory.peak` and `gpu.0.mig1.memory.peak`. Ordered by GPU, then instance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct GpuId {
    /// The GPU's NVML index (`gpu.index`); for a MIG instance, its parent GPU's.
    pub index: u32,
    /// The MIG instance's index on that GPU (`gpu.mig.index`), as NVML numbers the
    /// instances of one GPU; `None` for a whole GPU.
    pub mig: Option<u32>,
}

impl GpuId {
    /// A whole GPU.
    pub const fn gpu(index: u32) -> Self {
        Self { index, mig: None }
    }

    /// MIG instance `mig` of GPU `index`.
    pub const fn mig(index: u32, mig: u32) -> Self {
        Self {
            index,
            mig: Some(mig),
        }
    }
}

impl std::fmt::Display for GpuId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.mig {
            None => write!(f, "{}", self.index),
            Some(mig) => write!(f, "{}.mig{mig}", self.index),
        }
    }
}

impl std::str::FromStr for GpuId {
    type Err = std::num::ParseIntError;

    /// Reads `0` or `0.mig1`.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text.split_once(".mig") {
            None => Ok(Self::gpu(text.parse()?)),
            Some((index, mig)) => Ok(Self::mig(index.parse()?, mig.parse()?)),
        }
    }
}

/// In files (`sampler.json`, `limits.json`): a GPU as its NVML index, a number, as files
/// written before MIG instances had one; a MIG instance as text (`"0.mig1"`).
impl serde::Serialize for GpuId {
    fn serialize<S: serde::Serializer>(&self, out: S) -> Result<S::Ok, S::Error> {
        match self.mig {
            None => out.serialize_u32(self.index),
            Some(_) => out.collect_str(self),
        }
    }
}

impl<'de> serde::Deserialize<'de> for GpuId {
    fn deserialize<D: serde::Deserializer<'de>>(input: D) -> Result<Self, D::Error> {
        #[derive(serde::Deserialize)]
        #[serde(untagged)]
        enum Written {
            Index(u32),
            Text(String),
        }
        match Written::deserialize(input)? {
            Written::Index(index) => Ok(Self::gpu(index)),
            Written::Text(text) => text.parse().map_err(|_| {
                serde::de::Error::custom(format!("'{text}' is not a device (0, 0.mig1, ...)"))
            }),
        }
    }
}

/// One device's figures on a span (`gpu.<i>.memory.*`), present with several devices.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceFigures {
    /// The device.
    pub id: GpuId,
    /// At the span's start.
    pub start: Option<i64>,
    /// Highest while it was open.
    pub peak: Option<i64>,
    /// At its end (absent when the device was lost meanwhile).
    pub end: Option<i64>,
}

/// A span's energy and clocks as it carries them: `gpu.energy` and what goes with it, the
/// clock event reasons and the `gpu.throttled` event. Empty on a span whose source read
/// none (`None` is "not measured", never zero).
#[derive(Debug, Clone, Default, PartialEq)]
#[non_exhaustive]
pub struct EnergyFigures {
    /// `gpu.energy`, in joules, summed over the devices in scope.
    pub joules: Option<f64>,
    /// `gpu.energy.estimated`: the figure came from power readings, not the counters.
    pub estimated: bool,
    /// `gpu.power.avg`, in watts.
    pub power_watts: Option<f64>,
    /// `gpu.energy.per_sample`, in joules.
    pub per_sample: Option<f64>,
    /// `gpu.energy.scope`: what the figure covers beyond the devices (`gpu`, `socket`).
    pub scope: Option<String>,
    /// `gpu.<i>.energy`, in device order, with several devices.
    pub devices: Vec<(GpuId, f64)>,
    /// `gpu.throttle.reasons`, as the span names them.
    pub throttle_reasons: Vec<String>,
    /// `gpu.throttle.share`, 0 to 1.
    pub throttle_share: Option<f64>,
    /// `gpu.clock.sm.min`, in MHz.
    pub sm_clock_min_mhz: Option<i64>,
    /// The span carries a `gpu.throttled` event: the clocks were held down for much of it.
    pub throttled: bool,
}

/// A closed span as gpuspan reads it.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct SpanRecord {
    /// The span's name (`epoch`, `step`, or a `memory_span!` name).
    pub name: String,
    /// Epoch, step or other.
    pub role: Role,
    /// Trace id.
    pub trace_id: [u8; 16],
    /// Span id.
    pub span_id: [u8; 8],
    /// Parent span id, if the span has a parent.
    pub parent_span_id: Option<[u8; 8]>,
    /// Start, UNIX nanoseconds.
    pub start_unix_nanos: u64,
    /// End, UNIX nanoseconds.
    pub end_unix_nanos: u64,
    /// `gpu.memory.start` / `.peak` / `.end`.
    pub gpu: Option<Memory>,
    /// `gpu.<i>.memory.*`, in device order.
    pub devices: Vec<DeviceFigures>,
    /// `gpu.process.memory.*`.
    pub process_gpu: Option<Memory>,
    /// `process.memory.*` (host resident memory).
    pub host: Option<Memory>,
    /// `gpu.allocator.allocated.peak`.
    pub allocated_peak: Option<i64>,
    /// `gpu.allocator.reserved.peak`.
    pub reserved_peak: Option<i64>,
    /// `batch_size`, when the span carries one: an integer, or a string that is one.
    pub batch_size: Option<i64>,
    /// The span carries a `batch_size` that is not a whole number (the fit leaves it out).
    pub(crate) batch_size_unreadable: bool,
    /// `gpu.memory.source`.
    pub source: Option<String>,
    /// `gpu.memory.samples`.
    pub samples: Option<i64>,
    /// The error status message, if the span failed.
    pub error: Option<String>,
    /// Energy, power and clocks (`gpu.energy`, `gpu.throttle.*`).
    pub energy: EnergyFigures,
}

impl SpanRecord {
    /// Seconds between start and end.
    pub fn seconds(&self) -> f64 {
        self.end_unix_nanos.saturating_sub(self.start_unix_nanos) as f64 / 1e9
    }
}

#[cfg(test)]
mod tests {
    use super::GpuId;

    #[test]
    fn a_device_reads_back_as_written_in_keys_and_in_files() {
        for id in [
            GpuId::gpu(0),
            GpuId::gpu(7),
            GpuId::mig(0, 1),
            GpuId::mig(3, 6),
        ] {
            assert_eq!(id.to_string().parse::<GpuId>(), Ok(id));
            let json = serde_json::to_string(&id).unwrap();
            assert_eq!(serde_json::from_str::<GpuId>(&json).unwrap(), id);
        }
        assert_eq!(GpuId::mig(0, 1).to_string(), "0.mig1");
        // A whole GPU is a number in files, as before MIG instances had an id.
        assert_eq!(serde_json::to_string(&GpuId::gpu(3)).unwrap(), "3");
        assert_eq!(
            serde_json::to_string(&GpuId::mig(3, 2)).unwrap(),
            "\"3.mig2\""
        );
        assert!("0.mig".parse::<GpuId>().is_err());
        assert!("gpu0".parse::<GpuId>().is_err());
        let err = serde_json::from_str::<GpuId>("\"a.mig1\"").unwrap_err();
        assert!(
            err.to_string().contains("'a.mig1' is not a device"),
            "{err}"
        );
        assert!(GpuId::gpu(0) < GpuId::mig(0, 0) && GpuId::mig(0, 6) < GpuId::gpu(1));
    }
}

//! Settings, resolved once: code, then the signal's own variable, then the variable for
//! every signal, then the default.
//!
//! Every environment variable is read here and nowhere else (names in [`vars`], each
//! setting's in the table of [`table`]), and a value that does not parse is an error that
//! names the variable, the value and what would be accepted. What is resolved here is
//! final: exporters are built so that nothing reads the environment again.

mod destination;
pub(crate) mod error;
pub(crate) mod job;
mod kinds;
pub(crate) mod layered;
pub(crate) mod parse;
mod resolve;
mod row;
mod sampling;
mod scope;
pub(crate) mod table;
pub(crate) mod tls;
pub(crate) mod torch;
pub(crate) mod vars;

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::error::InitError;
use crate::source::drm::{DrmScope, Roots};
use crate::source::DeviceScope;
pub use destination::{Destination, OtlpTarget};
pub use error::InvalidValue;
pub use kinds::{Compression, Exporter, Protocol};
use layered::{layered, resolved, Env};
pub use resolve::{launcher_rank, resolve};
pub use row::{Setting, Vars};
pub(crate) use sampling::Sampling;
pub(crate) use scope::scope_setting;
pub use scope::{cuda_device, devices_chosen, hip_device};
pub(crate) use table::Signal;
pub(crate) use table::ROWS;

/// Default sampling interval: 5 ms. A spike of 10 ms (two intervals) is always seen, a
/// 200 ms step gets about 40 readings, and the sampler stays under 1% of a core (0.6% with 8
/// devices in BENCHMARKS.md, on the fake NVML; a real driver's read costs more).
pub const DEFAULT_SAMPLE_INTERVAL: Duration = Duration::from_millis(5);

/// How often energy, power and clock event reasons are read unless set otherwise: a real
/// energy counter moves every 20 to 100 ms, and these reads cost about as much as a memory
/// read each, so they keep a slower cadence than memory's.
pub const DEFAULT_POWER_INTERVAL: Duration = Duration::from_millis(20);

/// Values set in code through the builder; `None` falls back to the environment.
#[derive(Debug, Clone, Default)]
pub struct CodeSettings {
    pub(crate) disabled: Option<bool>,
    pub(crate) service_name: Option<String>,
    pub(crate) resource: Vec<(String, String)>,
    /// Time between two readings of every device.
    pub sample_interval: Option<Duration>,
    pub(crate) power_interval: Option<Duration>,
    /// Where NVML is loaded from.
    pub nvml_lib: Option<PathBuf>,
    pub(crate) devices: Option<String>,
    pub(crate) sysfs_root: Option<PathBuf>,
    pub(crate) procfs_root: Option<PathBuf>,
    /// The root of the run directories.
    pub run_dir: Option<PathBuf>,
    pub(crate) run_id: Option<String>,
    pub(crate) job_id: Option<String>,
    /// The OTLP endpoint, for both signals.
    pub endpoint: Option<String>,
    /// The OTLP protocol, for both signals.
    pub protocol: Option<Protocol>,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) timeout: Option<Duration>,
    pub(crate) compression: Option<Compression>,
    /// The CA an `https://` endpoint's certificate is checked against (PEM file).
    pub certificate: Option<PathBuf>,
    /// This client's certificate, for mutual TLS (PEM file).
    pub client_certificate: Option<PathBuf>,
    /// This client's private key, for mutual TLS (PEM file).
    pub client_key: Option<PathBuf>,
    pub(crate) insecure: Option<bool>,
    pub(crate) traces_exporter: Option<Exporter>,
    pub(crate) metrics_exporter: Option<Exporter>,
    pub(crate) metric_interval: Option<Duration>,
    pub(crate) prometheus_addr: Option<SocketAddr>,
    pub(crate) export_queue: Option<usize>,
    pub(crate) summary: Option<bool>,
    pub(crate) flush_on_signal: Option<bool>,
    /// Measure every device of the node even in a rank's environment (the collector).
    pub whole_node: bool,
}

/// Launcher-provided position of this process in a distributed run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Rank {
    pub(crate) rank: Option<i64>,
    pub(crate) local_rank: Option<i64>,
    pub(crate) world_size: Option<i64>,
    /// The id every rank of one job shares.
    pub(crate) job_id: Option<String>,
}

/// Every setting, resolved.
#[derive(Debug, Clone)]
pub struct Settings {
    pub(crate) disabled: bool,
    pub(crate) service_name: String,
    pub(crate) resource: Vec<(String, String)>,
    /// Time between two readings of every device.
    pub sample_interval: Duration,
    /// Time between two readings of energy, power and clock event reasons.
    pub(crate) power_interval: Duration,
    /// Where NVML is loaded from (`None`: the system's).
    #[cfg_attr(not(feature = "nvml"), allow(dead_code))]
    /// Where NVML is loaded from (`None`: the system's).
    pub nvml_lib: Option<PathBuf>,
    /// The devices in scope.
    pub devices: DeviceScope,
    /// The AMD and Intel devices in scope.
    pub(crate) drm_devices: DrmScope,
    /// Where the kernel's files are read for AMD and Intel GPUs.
    pub(crate) roots: Roots,
    /// Where `nvidia-smi` is looked for (`PATH`).
    pub(crate) search_path: Option<OsString>,
    /// The root of the run directories (`gpuspan-runs`).
    pub run_root: PathBuf,
    /// The run id, the name of the run's directory.
    pub run_id: String,
    /// The run id is this process's own (date, time and pid): no other rank shares its
    /// directory.
    pub(crate) run_id_is_own: bool,
    pub(crate) rank: Rank,
    /// Where spans go.
    pub traces: Destination,
    /// Where metric points go.
    pub metrics: Destination,
    pub(crate) metric_interval: Duration,
    pub(crate) prometheus_addr: Option<SocketAddr>,
    /// Completed spans that may wait for the destination.
    pub(crate) export_queue: usize,
    /// The event layer's filter (`RUST_LOG`), checked.
    pub(crate) log_filter: Option<String>,
    pub(crate) summary: bool,
    pub(crate) flush_on_signal: bool,
    pub(crate) sampling: Sampling,
}

/// Default number of completed spans that may wait for an unreachable destination: a few
/// minutes of 100 steps a second, about 60 MiB at most.
pub(crate) const DEFAULT_EXPORT_QUEUE: usize = 65_536;

/// A rank's run directory is `<run-id>/rank-<rank>` when a job has several ranks.
pub const RANK_DIR_PREFIX: &str = "rank-";

impl Settings {
    /// These settings for a collector's own telemetry: its gauges under `service_name`, no
    /// spans of its own (the spans it receives are forwarded, not its own), no summary, and
    /// no flush on a signal. Give them to [`Builder::build_resolved`](crate::Builder::build_resolved).
    #[must_use]
    pub fn for_collectors_own(&self, service_name: String) -> Settings {
        Settings {
            service_name,
            traces: Destination::None,
            summary: false,
            flush_on_signal: false,
            ..self.clone()
        }
    }

    /// The run directory: `<root>/<run-id>`, with one sub-directory per rank when the
    /// launcher says there are several.
    pub fn run_dir(&self) -> PathBuf {
        let dir = self.run_root.join(&self.run_id);
        match (self.rank.rank, self.rank.world_size) {
            (Some(rank), Some(world)) if world > 1 => dir.join(format!("{RANK_DIR_PREFIX}{rank}")),
            _ => dir,
        }
    }
}

/// Where `gpuspan report` looks for runs: `GPUSPAN_RUN_DIR`, else `gpuspan-runs`.
pub fn default_run_root() -> PathBuf {
    run_root(None, Env::process()).unwrap_or_else(|_| (table::RUN_DIR.value)())
}

pub(crate) fn run_root(code: Option<PathBuf>, env: Env<'_>) -> Result<PathBuf, InitError> {
    Ok(resolved(&table::RUN_DIR, code, env)?)
}

/// `OTEL_SERVICE_NAME`, for a command `gpuspan run` starts: the name it gets unless set.
#[cfg_attr(not(feature = "pipeline"), allow(dead_code))]
pub fn service_name_variable() -> Option<String> {
    layered(&table::SERVICE_NAME, None, None, Env::process())
        .ok()
        .flatten()
        .map(|(name, _)| name)
}

#[cfg(test)]
mod tests;

//! A run directory (`gpuspan-runs/<run-id>/`) read back: `traces.jsonl` and `metrics.jsonl`
//! in OTLP/JSON, the per-epoch summary drawn from the spans, a job's ranks side by side, and
//! the timeline file. The one reader that `gpuspan report`, the Python package and a
//! program's own checks share; the SDK writes these files as a run goes.

pub mod ranks;
pub mod sampler;
pub(crate) mod setup;
mod summary;
pub(crate) mod tfevents;
pub mod throttle;

pub use crate::config::{default_run_root, RANK_DIR_PREFIX};
pub use crate::diagnose::{Marker, DIAGNOSIS_EVENTS, LIMITS_FILE};
pub use crate::figures::SpanReader;
pub use crate::record::{DeviceFigures, EnergyFigures, GpuId, Memory, Role, SpanRecord};
pub use crate::timeline::file::{
    read_timeline, Figure, Series, Timeline, TimelineDevice, TimelineEncoder, TimelineError,
    TimelineFormatError, TIMELINE_FILE,
};
pub use crate::util::bytes;
pub use crate::util::energy;
pub(crate) use summary::SummaryTap;
pub use summary::{read_run, read_run_and, EpochSummary, EpochTable, RunSummary};

/// File of spans inside a run directory.
pub const TRACES_FILE: &str = "traces.jsonl";
/// File of metrics inside a run directory.
pub const METRICS_FILE: &str = "metrics.jsonl";

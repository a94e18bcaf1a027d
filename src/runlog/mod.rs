//! The embedded default: a local run directory (`gpuspan-runs/<run-id>/`) holding
//! `traces.jsonl` and `metrics.jsonl` in OTLP/JSON, and the per-epoch summary drawn from it.

pub mod ranks;
pub mod sampler;
mod summary;

pub use crate::config::{default_run_root, RANK_DIR_PREFIX};
pub use crate::record::{DeviceFigures, GpuId, Memory, Role, SpanRecord};
pub use summary::{read_run, EpochSummary, EpochTable, RunSummary};
pub(crate) use summary::{read_run_and, SummaryTap};

/// File of spans inside a run directory.
pub const TRACES_FILE: &str = "traces.jsonl";
/// File of metrics inside a run directory.
pub const METRICS_FILE: &str = "metrics.jsonl";

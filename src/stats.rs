//! What gpuspan measured of itself: how many spans and metric points reached their
//! destination ([`Telemetry::export_tally`](crate::Telemetry::export_tally)), the cadence
//! the sampler kept ([`Telemetry::sampler_stats`](crate::Telemetry::sampler_stats)), and
//! this process's peak held against the driver's accounting as the run ends.

pub use crate::export::health::{ExportCounts, ExportTally};
pub use crate::sampler::{DriverCheck, SamplerStats};

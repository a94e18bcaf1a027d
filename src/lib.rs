//! GPU memory on OpenTelemetry, for people who train models.
//!
//! gpuspan samples every GPU's memory on its own thread at millisecond intervals, and
//! wraps training loops in `epoch` and `step` spans that carry the memory at their start and
//! end and the **peak reached while they were open**, so the 200 ms spike that causes an
//! out-of-memory error shows on the step that caused it. Spans are [`tracing`] spans
//! exported over OTLP (through `tracing-opentelemetry`); per-device gauges follow the OTel
//! hardware semantic conventions (`hw.gpu.memory.usage`, ...).
//!
//! # Quick start
//!
//! ```no_run
//! # fn train_step() {}
//! fn main() -> Result<(), Box<dyn std::error::Error>> {
//!     // Env-configured: with no OTLP endpoint, writes gpuspan-runs/<run-id>/ and prints a
//!     // per-epoch table at shutdown; with OTEL_EXPORTER_OTLP_ENDPOINT, ships OTLP.
//!     let telemetry = gpuspan::init()?;
//!     for epoch in 0..3 {
//!         let _e = gpuspan::epoch_span!(epoch);
//!         for step in 0..100 {
//!             let _s = gpuspan::step_span!(step, batch_size = 64);
//!             train_step();
//!         }
//!     }
//!     telemetry.shutdown()?;
//!     Ok(())
//! }
//! ```
//!
//! Configure in code with [`Telemetry::builder`] (code beats environment), or add
//! [`Telemetry::layer`] to a subscriber of your own instead of [`init`].
//!
//! # What a span records
//! `gpu.memory.start` / `.end` / `.peak` / `.delta` (device memory summed over the devices
//! in scope), `gpu.<i>.memory.*` and `gpu.memory.imbalance` with several devices,
//! `gpu.process.memory.*` (this process's own, where the driver reports it),
//! `gpu.allocator.*.peak` (fed by [`record_allocator`]), `process.memory.*` (host RSS),
//! `gpu.memory.source` and `gpu.memory.samples`. Byte counts are integers.
//!
//! # Diagnosis
//! Span events for suspected leaks (`gpu.memory.leak_suspected`), memory budgets
//! (`gpu.memory.budget_exceeded`, [`Builder::memory_budget`]), near out-of-memory crossings
//! and reported out-of-memory errors (`gpu.memory.near_oom`, `gpu.memory.oom`,
//! [`record_oom`]) with a timeline file in the run directory, and the batch-size fit
//! ([`Telemetry::batch_fit`]). All of it is computed off the training thread.
//!
//! # Feature flags
//! - `nvml` (default): read GPU memory through NVML (`nvml-wrapper`, loaded at run time).
//! - `otlp-grpc` (default): OTLP over gRPC.
//! - `otlp-http` (default): OTLP over HTTP/protobuf.
//! - `prometheus` (default): the optional Prometheus scrape endpoint.
//! - `png`: `report::png` rasterizes the report picture (resvg).
//! - `cli`: the `gpuspan` command (`report`, `watch`); includes `png`.
//! - `collect`: the `collect` module, the OTLP receiver behind `gpuspan collect` and
//!   `gpuspan run` (implies `cli`).

#![warn(missing_docs, unreachable_pub, clippy::undocumented_unsafe_blocks)]

mod background;
#[cfg(feature = "cli")]
pub mod cli;
#[cfg(feature = "collect")]
pub mod collect;
mod config;
mod destinations;
mod diagnose;
#[cfg(feature = "cli")]
pub mod diff;
mod error;
mod export;
mod figures;
mod layer;
mod macros;
mod metrics;
pub mod names;
mod record;
pub mod report;
mod resource;
pub mod runlog;
mod sampler;
#[cfg(all(feature = "cli", feature = "nvml"))]
mod selftest;
mod signals;
mod source;
mod span;
mod telemetry;
mod timeline;
mod util;

#[doc(hidden)]
pub use macros::__private;
#[cfg(feature = "__bench")]
#[doc(hidden)]
pub use source::drm::__private as __drm;
#[cfg(feature = "__bench")]
#[doc(hidden)]
pub use timeline::__private as __timeline;

pub use config::{Compression, Exporter, InvalidValue, Protocol, DEFAULT_SAMPLE_INTERVAL};

/// The settings table and the grammars of its values, for the Python package and for the
/// tests that keep the variables, the builder setters and the Python keywords in step.
/// Not a stable API.
#[doc(hidden)]
pub mod settings {
    pub use crate::config::parse::{boolean, duration, fraction, listen_addr};
    pub use crate::config::torch::{
        torch, torch_memory_history, torch_phases, DEFAULT_MEMORY_HISTORY_ENTRIES,
    };
    pub use crate::config::{cuda_device, devices_chosen, launcher_rank};
    pub use crate::config::{Setting, Vars};
    pub use crate::telemetry::{setting, settings};
}
pub use diagnose::{record_oom, BatchFit, MemoryBudget};
pub use error::{InitError, ShutdownError};
pub use export::health::{ExportCounts, ExportTally};
pub use layer::record_allocator;
pub use record::GpuId;
pub use sampler::{DriverCheck, SamplerStats};
pub use source::{
    Device, DeviceReading, DeviceScope, DeviceScopeError, DriverPeak, MemorySource, ProcessLister,
};
pub use span::{MemorySpan, SpanMemory};
pub use telemetry::{init, Builder, DeviceMemory, Telemetry};

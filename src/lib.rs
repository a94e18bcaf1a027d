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
//! # Modules
//! - [`source`]: the [`MemorySource`](source::MemorySource) trait and what it reads, for a
//!   memory source of your own ([`Builder::memory_source`]).
//! - [`names`]: every span, attribute, event and metric name gpuspan writes, for queries
//!   and dashboards.
//! - [`stats`]: what gpuspan measured of itself: export counts, the sampler's cadence, the
//!   driver's accounting.
//! - [`runlog`]: a run directory read back: the spans, the per-epoch table, a job's ranks
//!   and the timeline.
//! - [`settings`]: the settings table (every setting's variables, default and doc) and the
//!   environment as gpuspan reads it (the launcher's rank, the PyTorch switches), for
//!   front ends and commands that must agree with it.
//! - `pipeline` (feature `pipeline`): the export queue and the sampler's ticks, for
//!   collectors of other programs' spans such as `gpuspan collect`.
//!
//! The `gpuspan` command (`run`, `collect`, `report`, `diff`, `watch`, `selftest`) is the
//! `gpuspan-cli` crate (`cargo install --path cli` from a clone of the repository).
//!
//! # Feature flags
//! - `nvml` (default): read GPU memory through NVML (`nvml-wrapper`, loaded at run time).
//! - `otlp-grpc` (default): OTLP over gRPC.
//! - `otlp-http` (default): OTLP over HTTP/protobuf.
//! - `prometheus` (default): the optional Prometheus scrape endpoint.
//! - `pipeline`: the `pipeline` module (implies `otlp-grpc` and `otlp-http`).

#![warn(missing_docs, unreachable_pub, clippy::undocumented_unsafe_blocks)]
// What `pipeline` re-exports is public for collectors; without the feature those items are
// the crate's own.
#![cfg_attr(not(feature = "pipeline"), allow(unreachable_pub))]

mod background;
mod config;
mod destinations;
mod diagnose;
mod error;
mod export;
mod figures;
mod layer;
mod macros;
mod metrics;
pub mod names;
#[cfg(feature = "pipeline")]
pub mod pipeline;
mod record;
mod resource;
pub mod runlog;
mod sampler;
pub mod settings;
mod signals;
pub mod source;
mod span;
pub mod stats;
mod telemetry;
mod timeline;
mod util;

#[doc(hidden)]
pub use macros::__private;
#[cfg(feature = "__bench")]
#[doc(hidden)]
pub use source::drm::__private as __drm;

pub use config::Protocol;
// Users name it `settings::InvalidValue`; the crate's own code keeps the short path.
pub(crate) use config::InvalidValue;

pub use diagnose::{record_oom, BatchFit, MemoryBudget};
pub use error::{InitError, ShutdownError};
pub use layer::record_allocator;
pub use span::{MemorySpan, SpanMemory};
pub use telemetry::{init, Builder, DeviceMemory, Telemetry};

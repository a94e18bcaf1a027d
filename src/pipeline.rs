//! The SDK's parts that a collector of other programs' spans builds on.
//!
//! It exists for `gpuspan collect` and `gpuspan run` (the `gpuspan-cli` crate) and for
//! other collectors that put gpuspan's memory figures on spans they receive. A program
//! that traces its own loop needs none of it: the crate root is that program's API.
//!
//! How the collector's settings read the environment, and the environment's names a
//! command gives the programs it starts, are in [`settings`](crate::settings).
//!
//! What a collector takes from here, in the order data flows:
//! - **Settings.** [`CodeSettings`] are what the collector sets in code; [`resolve`] reads
//!   the rest from the environment as [`Telemetry`](crate::Telemetry) does, into
//!   [`Settings`], whose [`Destination`] for each signal says where requests are
//!   forwarded ([`describe`] says it for people).
//! - **Ticks.** A [`TickObserver`] given to
//!   [`Builder::tick_observer`](crate::Builder::tick_observer) sees every [`Tick`] of the
//!   sampler, to keep as the collector needs (`gpuspan collect` keeps range maxima); a
//!   [`ProcessTable`], filled by [`gpu_source`], holds every process's GPU memory for
//!   spans of other processes.
//! - **Figures.** [`SpanFigures`] are a span's memory figures; [`SpanFigures::numbers`] and
//!   [`device_keys`] give the attributes the SDK's own spans carry, with the same names.
//! - **The export queue.** A [`Queue`] runs items through an [`Accept`] step and hands them
//!   in batches to a [`Sink`], with retry, backoff and exact loss accounting in an
//!   [`ExportHealth`]: the same queue the SDK's spans take. [`forward_target`] gives a
//!   signal's [`Transport`] from its destination: the request-level OTLP client (for any
//!   [`OtlpRequest`], shared through [`SharedRequest`]), an OTLP/JSON lines file, standard
//!   output, or nowhere.
//! - **Helpers.** [`unix_nanos`] stamps wall-clock time as the SDK's spans and ticks carry
//!   it, and [`lock`] takes a mutex whose holder panicked, as every lock in the SDK does;
//!   [`read_pem_file`] and [`private_key`] read a receiver's certificate and key as the
//!   SDK reads its own, bounded, an encrypted key said to be one.
//!
//! Threading: as each item's own documentation says; nothing here runs on a training
//! thread.

pub use crate::config::tls::{private_key, read_pem_file, MOST_PEM_BYTES};
pub use crate::config::{resolve, CodeSettings, Destination, OtlpTarget, Settings};
pub use crate::destinations::{describe, forward as forward_target, ForwardTarget, OpenError};
pub use crate::export::health::ExportHealth;
pub use crate::export::otlp::request::{OtlpRequest, SharedRequest};
pub use crate::export::queue::{Accept, Queue, QueueConfig, Transport};
pub use crate::export::sink::{Sink, SinkError, Undelivered};
pub use crate::figures::{device_keys, Number, SpanFigures, SpanPower, Triple};
pub use crate::source::processes::ProcessTable;
pub use crate::timeline::{Tick, TickObserver};
pub use crate::util::sync::lock;
pub use crate::util::time::unix_nanos;

/// The node's GPUs as the SDK reads them: NVML's devices, then the AMD and Intel devices
/// of the kernel's files (under the settings' sysfs and procfs roots), as one source on a
/// machine with both, each device once. NVML's process lists also keep every process's
/// memory in `processes`; where the kernel's files add devices, the table is never
/// complete (their other processes are not listed), so a process NVML does not list is
/// not measured rather than zero.
///
/// `None` when neither has a device in scope: a collector then leaves the choice to
/// [`Builder`](crate::Builder), which falls back to `nvidia-smi` or to none, with its
/// warning.
///
/// # Errors
/// [`InitError::InvalidSetting`](crate::InitError::InvalidSetting) for a UUID prefix in
/// the device scope that starts several devices' UUIDs, naming them.
pub fn gpu_source(
    settings: &Settings,
    processes: ProcessTable,
) -> Result<Option<Box<dyn crate::source::MemorySource>>, crate::InitError> {
    Ok(crate::telemetry::gpu_source::nvml_and_kernel_files(settings, Some(processes))?.ok())
}

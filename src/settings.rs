//! The settings table, and the environment read by gpuspan's own rules.
//!
//! Every setting is one row: its name (the Python keyword), its
//! [`Builder`](crate::Builder) setter, its variables, the grammar of their values, its
//! default and a one-line doc. [`settings`] lists the rows, for a front end that
//! presents or takes them (the Python package's `gpuspan.init()` keywords, a
//! configuration page). The grammars ([`boolean`], [`duration`], [`sample_interval`],
//! [`fraction`], [`listen_addr`]) read text as the variables do, so a value means the same
//! wherever it is given.
//!
//! The rest reads the environment as gpuspan does, for a program that must agree with it:
//! the launcher's rank and the runtimes' device numbering ([`launcher_rank`],
//! [`cuda_device`], [`hip_device`], [`devices_chosen`]), the PyTorch integration's switches
//! ([`torch`], [`torch_phases`], [`torch_memory_history`]), and the names a command gives
//! the programs it starts ([`service_name_variable`], [`job_id_variable`]). A bad value is
//! an error that names the variable, as at `init()`.

pub use crate::config::job::job_id_variable;
pub use crate::config::parse::{boolean, duration, fraction, listen_addr};
pub use crate::config::torch::{
    torch, torch_memory_history, torch_phases, DEFAULT_MEMORY_HISTORY_ENTRIES,
};
pub use crate::config::vars::GPUSPAN_JOB_ID;
pub use crate::config::{
    cuda_device, devices_chosen, hip_device, launcher_rank, service_name_variable, Setting, Vars,
};
pub use crate::config::{
    Compression, Exporter, InvalidValue, DEFAULT_POWER_INTERVAL, DEFAULT_SAMPLE_INTERVAL,
};
pub use crate::telemetry::{setting, settings};

/// The default sample interval as the table writes it (`5ms`), for a command's own flag.
pub const DEFAULT_SAMPLE_INTERVAL_TEXT: &str =
    crate::config::table::SAMPLE_INTERVAL.row.setting.default;

/// A sample interval as `GPUSPAN_SAMPLE_INTERVAL` takes it: [`duration`]'s grammar, at
/// least 100 µs.
///
/// # Errors
/// [`InvalidValue`], saying what would be accepted.
pub fn sample_interval(text: &str) -> Result<std::time::Duration, crate::InvalidValue> {
    crate::config::table::SAMPLE_INTERVAL.read(text)
}

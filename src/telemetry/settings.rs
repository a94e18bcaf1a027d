//! The whole settings table: the configuration's rows, then diagnosis' and the pictures'.
//! Assembled here, above every module that keeps rows, so that no module below imports
//! one above it.

use crate::config::Setting;

/// Every setting: the configuration's rows, then the pictures', diagnosis' and the PyTorch
/// integration's.
pub fn settings() -> impl Iterator<Item = &'static Setting> {
    crate::config::ROWS
        .iter()
        .chain(crate::runlog::setup::ROWS)
        .chain(crate::diagnose::settings::ROWS)
        .chain(crate::config::torch::ROWS)
}

/// The setting named `name` (its Python keyword).
pub fn setting(name: &str) -> Option<&'static Setting> {
    settings().find(|s| s.name == name)
}

//! The PyTorch integration's settings: whether `gpuspan run` hands a Python command its
//! bootstrap, the phases of every step, and PyTorch's memory history. Rows of the one
//! table, read from the environment only (no builder setter, no `init` keyword), by the
//! same grammars as every other row; the Python package asks for them through
//! `gpuspan::settings`, so a value means the same there as here.

use super::error::InvalidValue;
use super::layered::{resolved, Env};
use super::parse::{boolean, BOOLEAN};
use super::table::{Defaulted, Row, Setting, Vars};
use super::vars::{GPUSPAN_TORCH, GPUSPAN_TORCH_MEMORY_HISTORY, GPUSPAN_TORCH_PHASES};
use crate::error::InitError;

/// Allocations PyTorch's memory history keeps when it is only switched on.
pub const DEFAULT_MEMORY_HISTORY_ENTRIES: usize = 100_000;

/// What the memory history's variable takes.
const HISTORY: &str = "true or false (also on or off, yes or no, 1 or 0), or the number of \
                       allocations to keep, such as 200000";

pub(crate) const TORCH: Defaulted<bool> = Row::new(
    "torch",
    Vars::Ordered(&[GPUSPAN_TORCH]),
    BOOLEAN,
    "true",
    boolean,
)
.doc("Whether gpuspan run gives a Python command the bootstrap that opens PyTorch's steps.")
.environment_only()
.defaults_to(|| true);
pub(crate) const TORCH_PHASES: Defaulted<bool> = Row::new(
    "torch_phases",
    Vars::Ordered(&[GPUSPAN_TORCH_PHASES]),
    BOOLEAN,
    "false",
    boolean,
)
.doc("Whether every step under gpuspan run gets forward, backward and optimizer spans.")
.environment_only()
.defaults_to(|| false);
pub(crate) const TORCH_MEMORY_HISTORY: Defaulted<Option<usize>> = Row::new(
    "torch_memory_history",
    Vars::Ordered(&[GPUSPAN_TORCH_MEMORY_HISTORY]),
    HISTORY,
    "off",
    memory_history,
)
.doc("How many allocations PyTorch's CUDA memory history keeps under gpuspan run.")
.environment_only()
.defaults_to(|| None);

/// The PyTorch integration's rows of the settings table.
pub(crate) const ROWS: &[Setting] = &[
    TORCH.row.setting,
    TORCH_PHASES.row.setting,
    TORCH_MEMORY_HISTORY.row.setting,
];

/// A switch (on: the default size), or a number of allocations (0 and 1 are the switch's).
fn memory_history(text: &str) -> Result<Option<usize>, InvalidValue> {
    if let Ok(on) = boolean(text) {
        return Ok(on.then_some(DEFAULT_MEMORY_HISTORY_ENTRIES));
    }
    match text.trim().parse::<usize>() {
        Ok(entries) => Ok(Some(entries)),
        Err(_) => Err(InvalidValue::new(text, HISTORY)),
    }
}

/// `GPUSPAN_TORCH`: whether `gpuspan run` gives a Python command the bootstrap that
/// instruments PyTorch (default: yes).
///
/// # Errors
/// A value that is not a switch, named with the variable.
pub fn torch() -> Result<bool, InitError> {
    Ok(resolved(&TORCH, None, Env::process())?)
}

/// `GPUSPAN_TORCH_PHASES`: whether every step under `gpuspan run` gets `forward`,
/// `backward` and `optimizer` spans (default: no).
///
/// # Errors
/// A value that is not a switch, named with the variable.
pub fn torch_phases() -> Result<bool, InitError> {
    Ok(resolved(&TORCH_PHASES, None, Env::process())?)
}

/// `GPUSPAN_TORCH_MEMORY_HISTORY`: how many allocations PyTorch's memory history keeps
/// (`None`: off, the default; on: [`DEFAULT_MEMORY_HISTORY_ENTRIES`]).
///
/// # Errors
/// A value that is neither a switch nor a number, named with the variable.
pub fn torch_memory_history() -> Result<Option<usize>, InitError> {
    Ok(resolved(&TORCH_MEMORY_HISTORY, None, Env::process())?)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn history(text: &str) -> Result<Option<usize>, String> {
        TORCH_MEMORY_HISTORY.read(text).map_err(|e| e.to_string())
    }

    #[test]
    fn the_memory_history_takes_a_switch_or_a_size() {
        assert_eq!(history("yes"), Ok(Some(DEFAULT_MEMORY_HISTORY_ENTRIES)));
        assert_eq!(history("1"), Ok(Some(DEFAULT_MEMORY_HISTORY_ENTRIES)));
        assert_eq!(history(" Off "), Ok(None));
        assert_eq!(history("0"), Ok(None));
        assert_eq!(history("5000"), Ok(Some(5000)));
        let error = history("lots").unwrap_err();
        assert!(
            error.contains("lots") && error.contains("200000"),
            "{error}"
        );
    }

    #[test]
    fn every_torch_row_says_its_default() {
        for (row, text) in [(&TORCH, "true"), (&TORCH_PHASES, "false")] {
            assert_eq!(row.read(text).ok(), Some((row.value)()));
        }
        assert_eq!(TORCH_MEMORY_HISTORY.read("off").ok(), Some(None));
    }
}

//! The `gpuspan` command of the wheel: the crate's command line, run in this process.

use pyo3::prelude::*;

/// Runs `gpuspan` with `argv` (the program name first) and returns its exit status, which
/// for `gpuspan run` is the command's own.
#[pyfunction]
pub(crate) fn cli_main(py: Python<'_>, argv: Vec<String>) -> i32 {
    // `watch` and `run` last until they end: let other Python threads run meanwhile.
    i32::from(py.detach(|| gpuspan_cli::cli::exit_status(argv)))
}

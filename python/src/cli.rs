//! The `gpuspan` command of the wheel: the crate's command line, run in this process.

use pyo3::prelude::*;

/// Runs `gpuspan` with `argv` (the program name first) and returns its exit status.
#[pyfunction]
pub(crate) fn cli_main(py: Python<'_>, argv: Vec<String>) -> i32 {
    // `watch` runs until interrupted: let other Python threads run meanwhile.
    let code = py.detach(|| gpuspan::cli::main(argv));
    // ExitCode has no accessor; the command returns only these two.
    if code == std::process::ExitCode::SUCCESS {
        0
    } else {
        1
    }
}

//! `gpuspan.diff(base, new)`: two runs compared by the crate's `gpuspan diff`, with each of
//! its renderings, for the Python `Diff` object.

use std::path::PathBuf;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use gpuspan_cli::diff::{Diff, MaxIncrease};

/// The outcome: `(json, table, markdown, html, exit status)`.
type Outcome = (String, String, String, String, u8);

/// Compares the runs at `base` and `new` held to each `--max-increase` value in
/// `max_increase`; raises `ValueError` with the command's message on bad input.
#[pyfunction]
#[pyo3(signature = (base, new, max_increase = Vec::new()))]
pub(crate) fn diff(
    py: Python<'_>,
    base: PathBuf,
    new: PathBuf,
    max_increase: Vec<String>,
) -> PyResult<Outcome> {
    let mut limits = MaxIncrease::default();
    for text in &max_increase {
        limits
            .add(text)
            .map_err(|e| PyValueError::new_err(e.to_string()))?;
    }
    // Reading two runs takes a while: other Python threads run meanwhile.
    let diff = py
        .detach(|| Diff::compare(&base, &new, limits))
        .map_err(|e| PyValueError::new_err(e.to_string()))?;
    Ok((
        diff.to_json(),
        diff.table(),
        diff.markdown(),
        diff.html(),
        diff.exit_code(),
    ))
}

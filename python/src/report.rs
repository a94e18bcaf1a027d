//! `gpuspan.report(dir)`: a run directory's per-epoch summary, read by the crate's reader.

use std::path::PathBuf;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// One run: its path, the table as text, the memory source, and a dict per epoch.
type Run<'py> = (String, String, Option<String>, Vec<Bound<'py, PyDict>>);

/// The runs in `dir` (itself, its `rank-*` runs, or the newest run in a directory of runs),
/// each as `(path, table text, source, [epoch rows as dicts])`.
#[pyfunction]
pub(crate) fn read_run<'py>(py: Python<'py>, dir: PathBuf) -> PyResult<Vec<Run<'py>>> {
    let runs = gpuspan::cli::runs_in(&dir).map_err(|e| PyValueError::new_err(e.to_string()))?;
    let mut out = Vec::with_capacity(runs.len());
    for run in runs {
        let summary = gpuspan::runlog::read_run(&run)
            .map_err(|e| PyValueError::new_err(format!("cannot read {}: {e}", run.display())))?;
        let mut rows = Vec::with_capacity(summary.epochs.len());
        for epoch in &summary.epochs {
            let row = PyDict::new(py);
            row.set_item("epoch", epoch.epoch)?;
            row.set_item("seconds", epoch.seconds)?;
            row.set_item("steps", epoch.steps)?;
            for (prefix, memory) in [("gpu", &epoch.gpu), ("host", &epoch.host)] {
                if let Some(m) = memory {
                    row.set_item(format!("{prefix}_start"), m.start)?;
                    row.set_item(format!("{prefix}_peak"), m.peak)?;
                    row.set_item(format!("{prefix}_end"), m.end)?;
                }
            }
            if let Some(peak) = epoch.process_gpu_peak {
                row.set_item("process_gpu_peak", peak)?;
            }
            if let Some(error) = &epoch.error {
                row.set_item("error", error)?;
            }
            rows.push(row);
        }
        out.push((
            run.display().to_string(),
            summary.render(),
            summary.source.clone(),
            rows,
        ));
    }
    Ok(out)
}

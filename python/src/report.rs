//! `gpuspan.report(dir)`: a run directory's per-epoch summary, and a job's table across its
//! ranks, read by the crate's reader.

use std::path::PathBuf;

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use gpuspan::runlog::ranks::JobTable;

/// One run: its path, the table as text, the memory source, and a dict per epoch.
type Run<'py> = (String, String, Option<String>, Vec<Bound<'py, PyDict>>);

/// The runs in `dir` (itself, its `rank-*` runs, or the newest run in a directory of runs),
/// each as `(path, table text, source, [epoch rows as dicts])`; and with several ranks, the
/// job's figures as a dict (see `job`), else `None`.
#[pyfunction]
pub(crate) fn read_run<'py>(
    py: Python<'py>,
    dir: PathBuf,
) -> PyResult<(Vec<Run<'py>>, Option<Bound<'py, PyDict>>)> {
    let runs = gpuspan_cli::cli::runs_in(&dir).map_err(|e| PyValueError::new_err(e.to_string()))?;
    let (summaries, table) = gpuspan::runlog::ranks::read_job(&runs)
        .map_err(|e| PyValueError::new_err(e.to_string()))?;
    let mut out = Vec::with_capacity(runs.len());
    for (run, summary) in runs.iter().zip(summaries) {
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
    Ok((out, job(py, &table)?))
}

/// The job's figures, the same the `gpuspan report` table prints: `ranks`, `epochs` (a dict
/// per epoch: `worst_rank`, `worst_peak`, `lowest_peak`, `skew`, `slowest_rank`,
/// `slowest_seconds`), `steps`, `first_oom` and `first_forecast` (lines, or `None`), and
/// `table` (the text).
fn job<'py>(py: Python<'py>, table: &JobTable) -> PyResult<Option<Bound<'py, PyDict>>> {
    let Some(text) = table.render() else {
        return Ok(None);
    };
    let job = PyDict::new(py);
    job.set_item("ranks", table.ranks())?;
    let mut epochs = Vec::new();
    for (epoch, row) in table.epochs() {
        let d = PyDict::new(py);
        d.set_item("epoch", epoch)?;
        d.set_item("worst_rank", row.worst.as_ref().map(|(r, _)| r.clone()))?;
        d.set_item("worst_peak", row.worst.as_ref().map(|(_, p)| *p))?;
        d.set_item("lowest_peak", row.lowest)?;
        d.set_item("skew", row.skew)?;
        d.set_item("slowest_rank", row.slowest.0)?;
        d.set_item("slowest_seconds", row.slowest.1)?;
        epochs.push(d);
    }
    job.set_item("epochs", epochs)?;
    job.set_item("steps", table.steps_summary())?;
    job.set_item("first_oom", table.first_out_of_memory())?;
    job.set_item("first_forecast", table.first_forecast())?;
    job.set_item("table", text)?;
    Ok(Some(job))
}

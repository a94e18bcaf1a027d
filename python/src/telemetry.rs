//! `gpuspan.init()` and the running `Telemetry`: the crate's `Telemetry::builder()` with the
//! keyword settings applied, installed as this process's subscriber.

use std::sync::Mutex;

use gpuspan::InitError;
use pyo3::exceptions::{PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::settings;

/// Sets gpuspan up from the environment and the keyword settings, and installs it for
/// this process.
#[pyfunction]
#[pyo3(signature = (settings = None))]
pub(crate) fn init(py: Python<'_>, settings: Option<&Bound<'_, PyDict>>) -> PyResult<Telemetry> {
    let mut builder = gpuspan::Telemetry::builder();
    if let Some(settings) = settings {
        builder = settings::apply(builder, settings)?;
    }
    // Starting exporters can wait on the network: let other threads run.
    let telemetry = py.detach(|| builder.install()).map_err(init_error)?;
    Ok(Telemetry {
        run_dir: telemetry
            .run_dir()
            .map(|p| p.to_string_lossy().into_owned()),
        run_id: telemetry.run_id().map(str::to_owned),
        memory_source: telemetry.memory_source().map(str::to_owned),
        inner: Mutex::new(Some(telemetry)),
    })
}

/// A bad setting is a `ValueError` (its message names the variable or keyword and the
/// value); anything else that stops setting up is a `RuntimeError`.
fn init_error(error: InitError) -> PyErr {
    match error {
        InitError::InvalidSetting { .. } => PyValueError::new_err(error.to_string()),
        InitError::AlreadyInstalled => PyRuntimeError::new_err(
            "gpuspan is already set up in this process (a global tracing subscriber is \
             installed): call gpuspan.init() once and keep the Telemetry it returns",
        ),
        other => PyRuntimeError::new_err(other.to_string()),
    }
}

/// The running telemetry: sampler, exporters and run directory.
#[pyclass(frozen, module = "gpuspan")]
pub(crate) struct Telemetry {
    inner: Mutex<Option<gpuspan::Telemetry>>,
    run_dir: Option<String>,
    run_id: Option<String>,
    memory_source: Option<String>,
}

#[pymethods]
impl Telemetry {
    /// Flushes, stops the sampler and exporters, and prints the run's summary. Calling it
    /// again does nothing.
    fn shutdown(&self, py: Python<'_>) -> PyResult<()> {
        // Locks only without the GIL, so a thread that holds the lock never waits for it.
        py.detach(|| match self.inner.lock().ok().and_then(|mut t| t.take()) {
            Some(telemetry) => telemetry.shutdown(),
            None => Ok(()),
        })
        .map_err(|e| PyRuntimeError::new_err(e.to_string()))
    }

    /// Exports everything recorded so far without shutting down.
    fn flush(&self, py: Python<'_>) -> PyResult<()> {
        py.detach(|| match self.inner.lock().ok().as_deref() {
            Some(Some(telemetry)) => telemetry.flush(),
            _ => Ok(()),
        })
        .map_err(|e| PyRuntimeError::new_err(e.to_string()))
    }

    /// Flushes on SIGTERM and then lets the signal do what it would without gpuspan (the
    /// core's signal thread); SIGINT stays Python's `KeyboardInterrupt`.
    fn flush_on_sigterm(&self, py: Python<'_>) -> PyResult<()> {
        py.detach(|| match self.inner.lock().ok().as_deref() {
            Some(Some(telemetry)) => telemetry.flush_on_sigterm(),
            _ => Ok(()),
        })
        .map_err(init_error)
    }

    /// Where diagnosis writes its files (near-OOM timelines, memory snapshots), also when
    /// spans go over OTLP.
    #[getter]
    fn diagnosis_dir(&self) -> Option<String> {
        self.inner.lock().ok().and_then(|t| {
            t.as_ref()
                .and_then(|t| t.diagnosis_dir())
                .map(|d| d.to_string_lossy().into_owned())
        })
    }

    /// How many diagnosis findings of one kind were made so far, by event name
    /// (`"gpu.memory.near_oom"`).
    fn findings(&self, event: &str) -> u64 {
        self.inner
            .lock()
            .ok()
            .and_then(|t| t.as_ref().map(|t| t.findings(event)))
            .unwrap_or(0)
    }

    /// Why gpuspan asks the training loop to stop (`memory_budget_stop`: the first
    /// reading over the memory budget; `memory_forecast_stop`: the first OOM forecast), or
    /// `None`. A loop checks it at the end of a step.
    fn stop_requested(&self) -> Option<String> {
        self.inner
            .lock()
            .ok()
            .and_then(|t| t.as_ref().and_then(|t| t.stop_requested()))
    }

    /// Whether a reading over the memory budget asks the loop to stop (`memory_budget_stop`).
    #[getter]
    fn memory_budget_stop(&self) -> bool {
        self.inner
            .lock()
            .ok()
            .is_some_and(|t| t.as_ref().is_some_and(|t| t.memory_budget_stop()))
    }

    /// Whether an OOM forecast asks the loop to stop (`memory_forecast_stop`).
    #[getter]
    fn memory_forecast_stop(&self) -> bool {
        self.inner
            .lock()
            .ok()
            .is_some_and(|t| t.as_ref().is_some_and(|t| t.memory_forecast_stop()))
    }

    /// Whether `shutdown()` has run.
    #[getter]
    fn is_shut_down(&self) -> bool {
        self.inner.lock().map_or(true, |t| t.is_none())
    }

    /// The run directory, when traces or metrics are written to one.
    #[getter]
    fn run_dir(&self) -> Option<String> {
        self.run_dir.clone()
    }

    /// `ml.run.id` of this run (`None` when disabled).
    #[getter]
    fn run_id(&self) -> Option<String> {
        self.run_id.clone()
    }

    /// `gpu.memory.source`: `nvml`, `nvidia-smi` or `none` (`None` when disabled).
    #[getter]
    fn memory_source(&self) -> Option<String> {
        self.memory_source.clone()
    }

    fn __repr__(&self) -> String {
        let text = |v: &Option<String>| v.as_ref().map_or("None".to_owned(), |s| format!("{s:?}"));
        format!(
            "gpuspan.Telemetry(run_id={}, run_dir={}, memory_source={})",
            text(&self.run_id),
            text(&self.run_dir),
            text(&self.memory_source)
        )
    }
}

//! `gpuspan.init(**settings)`: one keyword per row of the crate's settings table, each
//! calling that row's `Builder` setter, so code beats the environment exactly as in Rust.
//! Text values are read with the same grammar as the row's variable (durations take
//! units: a bare number in text is milliseconds, as in `GPUSPAN_SAMPLE_INTERVAL`);
//! numbers of seconds and `timedelta`s are durations too. A bad keyword or value is a
//! `ValueError` naming it.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use gpuspan::settings as table;
use gpuspan::settings::InvalidValue;
use gpuspan::{Builder, MemoryBudget};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString, PyTuple};

/// Every keyword `init` takes, in the table's order: the rows code sets.
pub(crate) fn names() -> Vec<&'static str> {
    table::settings()
        .filter(|s| s.in_code())
        .map(|s| s.name)
        .collect()
}

/// `GPUSPAN_TORCH_PHASES`, read by the crate's grammar; a bad value is a `ValueError` that
/// names the variable, as every setting's.
#[pyfunction]
pub(crate) fn torch_phases() -> PyResult<bool> {
    table::torch_phases().map_err(|e| PyValueError::new_err(e.to_string()))
}

/// The launcher's rank of this process, by the crate's rules (`None` outside a launcher).
#[pyfunction]
pub(crate) fn launcher_rank() -> PyResult<Option<i64>> {
    table::launcher_rank().map_err(|e| PyValueError::new_err(e.to_string()))
}

/// Whether `GPUSPAN_DEVICES` chooses the devices, by the crate's rules.
#[pyfunction]
pub(crate) fn devices_chosen() -> bool {
    table::devices_chosen()
}

/// CUDA's device `ordinal` as a `devices` entry: its `CUDA_VISIBLE_DEVICES` entry as the
/// crate reads that list, else the number.
#[pyfunction]
pub(crate) fn cuda_device(ordinal: usize) -> PyResult<String> {
    table::cuda_device(ordinal).map_err(|e| PyValueError::new_err(e.to_string()))
}

/// HIP's device `ordinal` (PyTorch on ROCm) as a `devices` entry: the AMD GPU that
/// `ROCR_VISIBLE_DEVICES`, then `HIP_VISIBLE_DEVICES` (else `CUDA_VISIBLE_DEVICES`) leave
/// at that position, by its `hw.id`, as the crate reads those lists.
#[pyfunction]
pub(crate) fn hip_device(ordinal: usize) -> PyResult<String> {
    table::hip_device(ordinal).map_err(|e| PyValueError::new_err(e.to_string()))
}

/// `GPUSPAN_TORCH_MEMORY_HISTORY`: the allocations to keep, or `None` when off.
#[pyfunction]
pub(crate) fn torch_memory_history() -> PyResult<Option<usize>> {
    table::torch_memory_history().map_err(|e| PyValueError::new_err(e.to_string()))
}

/// `gpuspan._native.SETTINGS`: the keywords, for the package and its tests.
pub(crate) fn listing(py: Python<'_>) -> PyResult<Bound<'_, PyTuple>> {
    PyTuple::new(py, names())
}

/// `gpuspan._native.SETTING_DOCS`: `(keyword, variable, one-line doc, default)` for each
/// keyword, in the table's order, from which the package writes `init`'s docstring.
pub(crate) fn docs(py: Python<'_>) -> PyResult<Bound<'_, PyTuple>> {
    PyTuple::new(
        py,
        table::settings()
            .filter(|s| s.in_code())
            .map(|s| (s.name, s.vars.primary(), s.doc, s.default))
            .collect::<Vec<_>>(),
    )
}

/// Where `gpuspan.report()` looks for runs: `GPUSPAN_RUN_DIR` as the crate reads it (a
/// blank variable is unset), else `gpuspan-runs`.
#[pyfunction]
pub(crate) fn run_root() -> PathBuf {
    gpuspan::runlog::default_run_root()
}

/// Applies `settings` to a builder that is then dropped: whether `init` would take them,
/// without setting anything up (for the tests).
#[pyfunction]
pub(crate) fn check_settings(settings: &Bound<'_, PyDict>) -> PyResult<()> {
    apply(gpuspan::Telemetry::builder(), settings).map(drop)
}

/// Applies the keyword settings to a builder.
pub(crate) fn apply(mut builder: Builder, settings: &Bound<'_, PyDict>) -> PyResult<Builder> {
    for (key, value) in settings.iter() {
        let key: String = key.extract()?;
        if !table::setting(&key).is_some_and(|s| s.in_code()) {
            return Err(PyTypeError::new_err(format!(
                "gpuspan.init() got an unknown setting {key:?}; the settings are: {}, allocator",
                names().join(", ")
            )));
        }
        builder = setting(builder, &key, &value).map_err(|e| {
            if e.is_instance_of::<PyValueError>(value.py())
                || e.is_instance_of::<PyTypeError>(value.py())
            {
                // Name the keyword in every conversion error.
                PyValueError::new_err(format!(
                    "gpuspan.init({key}={}): {}",
                    repr(&value),
                    e.value(value.py())
                ))
            } else {
                e
            }
        })?;
    }
    Ok(builder)
}

/// One keyword's setter; every row of the table has an arm (the tests apply each).
fn setting(builder: Builder, key: &str, value: &Bound<'_, PyAny>) -> PyResult<Builder> {
    Ok(match key {
        "disabled" => builder.disabled(flag(value)?),
        "service_name" => builder.service_name(value.extract::<String>()?),
        "resource_attributes" => {
            let mut builder = builder;
            for (k, v) in value.downcast::<PyDict>()?.iter() {
                builder = builder.resource_attribute(k.extract::<String>()?, v.str()?.to_string());
            }
            builder
        }
        "sample_interval" => builder.sample_interval(duration(value)?),
        "power_interval" => builder.power_interval(duration(value)?),
        "nvml_lib" => builder.nvml_lib(value.extract::<PathBuf>()?),
        "devices" => builder.devices(devices(value)?),
        "sysfs_root" => builder.sysfs_root(value.extract::<PathBuf>()?),
        "procfs_root" => builder.procfs_root(value.extract::<PathBuf>()?),
        "run_dir" => builder.run_dir(value.extract::<PathBuf>()?),
        "run_id" => builder.run_id(value.extract::<String>()?),
        "job_id" => builder.job_id(value.extract::<String>()?),
        "endpoint" => builder.endpoint(value.extract::<String>()?),
        "protocol" => builder.protocol(parsed(value)?),
        "headers" => {
            let mut builder = builder;
            for (k, v) in value.downcast::<PyDict>()?.iter() {
                builder = builder.header(k.extract::<String>()?, v.extract::<String>()?);
            }
            builder
        }
        "timeout" => builder.timeout(duration(value)?),
        "compression" => builder.compression(parsed(value)?),
        "certificate" => builder.certificate(value.extract::<PathBuf>()?),
        "client_certificate" => builder.client_certificate(value.extract::<PathBuf>()?),
        "client_key" => builder.client_key(value.extract::<PathBuf>()?),
        "insecure" => builder.insecure(flag(value)?),
        "traces_exporter" => builder.traces_exporter(parsed(value)?),
        "metrics_exporter" => builder.metrics_exporter(parsed(value)?),
        "metric_export_interval" => builder.metric_export_interval(duration(value)?),
        "prometheus_addr" => builder.prometheus_addr(socket_addr(value)?),
        "export_queue" => builder.export_queue(value.extract::<usize>()?),
        "summary" => builder.summary(flag(value)?),
        "flush_on_signal" => builder.flush_on_signal(flag(value)?),
        "timeline" => builder.timeline(flag(value)?),
        "tensorboard" => builder.tensorboard(flag(value)?),
        "memory_budget" => builder.memory_budget(budget(value)?),
        "memory_budget_error" => builder.memory_budget_error(flag(value)?),
        "memory_budget_stop" => builder.memory_budget_stop(flag(value)?),
        "memory_forecast_stop" => builder.memory_forecast_stop(flag(value)?),
        "leak_ratio" => builder.leak_ratio(value.extract::<f64>()?),
        "leak_warmup" => builder.leak_warmup(value.extract::<usize>()?),
        "near_oom_threshold" => builder.near_oom_threshold(fraction(value)?),
        "near_oom_window" => builder.near_oom_window(duration(value)?),
        _ => return Err(PyTypeError::new_err(format!("unknown setting {key:?}"))),
    })
}

fn repr(value: &Bound<'_, PyAny>) -> String {
    value
        .repr()
        .map_or_else(|_| "?".to_owned(), |r| r.to_string())
}

/// What a grammar said, as a `ValueError`.
fn rejected(error: InvalidValue) -> PyErr {
    PyValueError::new_err(format!("expected {}", error.expected()))
}

/// A choice (protocol, exporter, compression) by the crate's own spelling.
fn parsed<T: std::str::FromStr<Err = InvalidValue>>(value: &Bound<'_, PyAny>) -> PyResult<T> {
    value.extract::<String>()?.parse().map_err(rejected)
}

/// `True`/`False`, or text in the variables' boolean grammar (`"on"`, `"false"`, ...).
fn flag(value: &Bound<'_, PyAny>) -> PyResult<bool> {
    match value.downcast::<PyString>() {
        Ok(text) => table::boolean(&text.to_cow()?).map_err(rejected),
        Err(_) => value.extract::<bool>(),
    }
}

/// Seconds as a number, a `datetime.timedelta`, or text such as `"5ms"`, `"500us"`, `"2s"`.
fn duration(value: &Bound<'_, PyAny>) -> PyResult<Duration> {
    if let Ok(text) = value.downcast::<PyString>() {
        return table::duration(&text.to_cow()?).map_err(rejected);
    }
    if let Ok(delta) = value.extract::<Duration>() {
        return Ok(delta);
    }
    let seconds = value.extract::<f64>().map_err(|_| {
        PyTypeError::new_err(
            "expected seconds (a number), a timedelta, or a string such as \"5ms\"",
        )
    })?;
    Duration::try_from_secs_f64(seconds)
        .map_err(|_| PyValueError::new_err("expected a duration of zero or more seconds"))
}

/// A fraction of a device: a number such as `0.95`, or text such as `"95%"`.
fn fraction(value: &Bound<'_, PyAny>) -> PyResult<f64> {
    match value.downcast::<PyString>() {
        Ok(text) => table::fraction(&text.to_cow()?).map_err(rejected),
        Err(_) => value.extract::<f64>(),
    }
}

/// Bytes as a whole number, or text such as `"20GiB"` or `"80%"`.
fn budget(value: &Bound<'_, PyAny>) -> PyResult<MemoryBudget> {
    match value.downcast::<PyString>() {
        Ok(text) => text.to_cow()?.parse().map_err(rejected),
        Err(_) => value.extract::<u64>().map(MemoryBudget::Bytes),
    }
}

/// A comma-separated string, or a list of NVML indexes and `GPU-...` or `MIG-...` UUIDs.
fn devices(value: &Bound<'_, PyAny>) -> PyResult<String> {
    if let Ok(text) = value.extract::<String>() {
        return Ok(text);
    }
    let items: Vec<Bound<'_, PyAny>> = value.try_iter()?.collect::<PyResult<_>>()?;
    let parts: Vec<String> = items
        .iter()
        .map(|item| item.str().map(|s| s.to_string()))
        .collect::<PyResult<_>>()?;
    Ok(parts.join(","))
}

/// A port number (on 127.0.0.1), or text as `GPUSPAN_PROMETHEUS_ADDR` takes it.
fn socket_addr(value: &Bound<'_, PyAny>) -> PyResult<SocketAddr> {
    if let Ok(port) = value.extract::<u16>() {
        return Ok(SocketAddr::from(([127, 0, 0, 1], port)));
    }
    table::listen_addr(&value.extract::<String>()?).map_err(rejected)
}

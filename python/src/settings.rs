//! `gpuspan.init(**settings)`: each keyword maps to one `Builder` setter, so code beats the
//! environment exactly as in Rust. A bad keyword or value is a `ValueError` naming it.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use gpuspan::{Builder, Exporter, Protocol};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString};

/// Every keyword `init` takes, with the Rust setter it calls.
pub(crate) const NAMES: &[&str] = &[
    "service_name",
    "resource_attributes",
    "sample_interval",
    "nvml_lib",
    "devices",
    "run_dir",
    "run_id",
    "endpoint",
    "protocol",
    "headers",
    "timeout",
    "traces_exporter",
    "metrics_exporter",
    "metric_export_interval",
    "prometheus_addr",
    "disabled",
    "summary",
    "flush_on_signal",
];

/// Applies the keyword settings to a builder.
pub(crate) fn apply(mut builder: Builder, settings: &Bound<'_, PyDict>) -> PyResult<Builder> {
    for (key, value) in settings.iter() {
        let key: String = key.extract()?;
        if !NAMES.contains(&key.as_str()) {
            return Err(PyTypeError::new_err(format!(
                "gpuspan.init() got an unknown setting {key:?}; the settings are: {}, allocator",
                NAMES.join(", ")
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

fn setting(builder: Builder, key: &str, value: &Bound<'_, PyAny>) -> PyResult<Builder> {
    Ok(match key {
        "service_name" => builder.service_name(value.extract::<String>()?),
        "resource_attributes" => {
            let mut builder = builder;
            for (k, v) in value.downcast::<PyDict>()?.iter() {
                builder = builder.resource_attribute(k.extract::<String>()?, v.str()?.to_string());
            }
            builder
        }
        "sample_interval" => builder.sample_interval(duration(value)?),
        "nvml_lib" => builder.nvml_lib(value.extract::<PathBuf>()?),
        "devices" => builder.devices(devices(value)?),
        "run_dir" => builder.run_dir(value.extract::<PathBuf>()?),
        "run_id" => builder.run_id(value.extract::<String>()?),
        "endpoint" => builder.endpoint(value.extract::<String>()?),
        "protocol" => builder.protocol(match value.extract::<String>()?.as_str() {
            "grpc" => Protocol::Grpc,
            "http/protobuf" => Protocol::HttpProtobuf,
            _ => {
                return Err(PyValueError::new_err(
                    "expected \"grpc\" or \"http/protobuf\"",
                ))
            }
        }),
        "headers" => {
            let mut builder = builder;
            for (k, v) in value.downcast::<PyDict>()?.iter() {
                builder = builder.header(k.extract::<String>()?, v.extract::<String>()?);
            }
            builder
        }
        "timeout" => builder.timeout(duration(value)?),
        "traces_exporter" => builder.traces_exporter(exporter(value)?),
        "metrics_exporter" => builder.metrics_exporter(exporter(value)?),
        "metric_export_interval" => builder.metric_export_interval(duration(value)?),
        "prometheus_addr" => builder.prometheus_addr(socket_addr(value)?),
        "disabled" => builder.disabled(value.extract::<bool>()?),
        "summary" => builder.summary(value.extract::<bool>()?),
        "flush_on_signal" => builder.flush_on_signal(value.extract::<bool>()?),
        _ => return Err(PyTypeError::new_err(format!("unknown setting {key:?}"))),
    })
}

fn repr(value: &Bound<'_, PyAny>) -> String {
    value
        .repr()
        .map_or_else(|_| "?".to_owned(), |r| r.to_string())
}

/// Seconds as a number, a `datetime.timedelta`, or a string such as `"5ms"`, `"500us"`, `"2s"`.
fn duration(value: &Bound<'_, PyAny>) -> PyResult<Duration> {
    let seconds = if let Ok(text) = value.downcast::<PyString>() {
        parse_duration(&text.to_cow()?)?
    } else if let Ok(delta) = value.extract::<Duration>() {
        return Ok(delta);
    } else {
        value.extract::<f64>().map_err(|_| {
            PyTypeError::new_err(
                "expected seconds (a number), a timedelta, or a string such as \"5ms\"",
            )
        })?
    };
    Duration::try_from_secs_f64(seconds)
        .map_err(|_| PyValueError::new_err("expected a duration of zero or more seconds"))
}

fn parse_duration(text: &str) -> PyResult<f64> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let scale = match unit.trim() {
        "ns" => 1e-9,
        "us" | "µs" => 1e-6,
        "ms" => 1e-3,
        "s" | "" => 1.0,
        _ => {
            return Err(PyValueError::new_err(
                "expected a duration such as \"5ms\", \"500us\" or \"2s\"",
            ))
        }
    };
    number.parse::<f64>().map(|n| n * scale).map_err(|_| {
        PyValueError::new_err("expected a duration such as \"5ms\", \"500us\" or \"2s\"")
    })
}

/// A comma-separated string, or a list of NVML indexes and `GPU-...` UUIDs.
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

fn exporter(value: &Bound<'_, PyAny>) -> PyResult<Exporter> {
    match value.extract::<String>()?.as_str() {
        "otlp" => Ok(Exporter::Otlp),
        "console" => Ok(Exporter::Console),
        "none" => Ok(Exporter::None),
        "run_dir" => Ok(Exporter::RunDir),
        _ => Err(PyValueError::new_err(
            "expected \"otlp\", \"console\", \"none\" or \"run_dir\"",
        )),
    }
}

/// A port number (on 127.0.0.1) or an `address:port` string.
fn socket_addr(value: &Bound<'_, PyAny>) -> PyResult<SocketAddr> {
    if let Ok(port) = value.extract::<u16>() {
        return Ok(SocketAddr::from(([127, 0, 0, 1], port)));
    }
    let text = value.extract::<String>()?;
    if let Ok(port) = text.parse::<u16>() {
        return Ok(SocketAddr::from(([127, 0, 0, 1], port)));
    }
    text.parse().map_err(|_| {
        PyValueError::new_err("expected a port or an address such as \"127.0.0.1:9464\"")
    })
}

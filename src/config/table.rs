//! The settings table: one row per setting, with its name, the builder setter that sets it
//! in code, the variables that set it from the environment (in precedence order), what
//! its grammar accepts and its default. Diagnosis and the report's pictures keep their
//! rows next to their code; `telemetry::settings` lists them all, for the Python keywords, the
//! guide's configuration table (docs/configuration.md) and the tests that keep those
//! surfaces in step.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use super::error::InvalidValue;
use super::kinds::{COMPRESSIONS, EXPORTERS, PROTOCOLS};
use super::parse::{self, *};
pub(crate) use super::row::{Defaulted, Row, Setting, Signal, Vars};
use super::vars::*;
use super::{Compression, Exporter, Protocol};
use crate::source::DeviceScope;

/// The rows of the settings this module resolves; diagnosis and the pictures keep theirs
/// next to their code, and `telemetry::settings` lists all of them.
pub(crate) const ROWS: &[Setting] = &[
    DISABLED.row.setting,
    SERVICE_NAME.setting,
    RESOURCE_ATTRIBUTES.setting,
    SAMPLE_INTERVAL.row.setting,
    POWER_INTERVAL.row.setting,
    NVML_LIB.setting,
    DEVICES.setting,
    SYSFS_ROOT.row.setting,
    PROCFS_ROOT.row.setting,
    RUN_DIR.row.setting,
    RUN_ID.setting,
    JOB_ID.setting,
    ENDPOINT.setting,
    PROTOCOL.row.setting,
    HEADERS.setting,
    TIMEOUT.row.setting,
    COMPRESSION.row.setting,
    CERTIFICATE.setting,
    CLIENT_CERTIFICATE.setting,
    CLIENT_KEY.setting,
    INSECURE.row.setting,
    TRACES_EXPORTER.setting,
    METRICS_EXPORTER.setting,
    METRIC_EXPORT_INTERVAL.row.setting,
    PROMETHEUS_ADDR.setting,
    EXPORT_QUEUE.row.setting,
    SUMMARY.row.setting,
    FLUSH_ON_SIGNAL.row.setting,
];

const fn one(var: &'static [&'static str]) -> Vars {
    Vars::Ordered(var)
}

pub(crate) const DISABLED: Defaulted<bool> = Row::new(
    "disabled",
    one(&[OTEL_SDK_DISABLED]),
    BOOLEAN,
    "false",
    boolean,
)
.doc("Records nothing, at next to no cost.")
.defaults_to(|| false);
pub(crate) const SERVICE_NAME: Row<String> = Row::new(
    "service_name",
    one(&[OTEL_SERVICE_NAME]),
    TEXT,
    "service.name of OTEL_RESOURCE_ATTRIBUTES, else unknown_service:<executable>",
    text,
)
.doc("The service.name of every span and metric point.");
pub(crate) const RESOURCE_ATTRIBUTES: Row<Vec<(String, String)>> = Row::new(
    "resource_attributes",
    one(&[OTEL_RESOURCE_ATTRIBUTES]),
    KEY_VALUES,
    "none",
    key_values,
)
.doc("Attributes added to the resource.")
.setter("resource_attribute");

/// Shortest sampling interval accepted.
pub(crate) const MIN_SAMPLE_INTERVAL: Duration = Duration::from_micros(100);

pub(crate) const SAMPLE_INTERVAL: Defaulted<Duration> = Row::new(
    "sample_interval",
    one(&[GPUSPAN_SAMPLE_INTERVAL]),
    DURATION,
    "5ms",
    duration,
)
.doc("Time between two readings of every device.")
.checked(check_sample_interval)
.defaults_to(|| super::DEFAULT_SAMPLE_INTERVAL);

/// An interval the sampler can keep: at least [`MIN_SAMPLE_INTERVAL`].
fn check_sample_interval(interval: &Duration) -> Result<(), &'static str> {
    if *interval < MIN_SAMPLE_INTERVAL {
        Err("an interval of at least 100us, such as 5ms")
    } else {
        Ok(())
    }
}

pub(crate) const POWER_INTERVAL: Defaulted<Duration> = Row::new(
    "power_interval",
    one(&[GPUSPAN_POWER_INTERVAL]),
    DURATION,
    "20ms",
    duration,
)
.doc("Time between two readings of energy and power.")
.checked(check_power_interval)
.defaults_to(|| super::DEFAULT_POWER_INTERVAL);

/// A cadence for the slower readings: at least [`MIN_SAMPLE_INTERVAL`], as memory's.
fn check_power_interval(interval: &Duration) -> Result<(), &'static str> {
    if *interval < MIN_SAMPLE_INTERVAL {
        Err("an interval of at least 100us, such as 20ms")
    } else {
        Ok(())
    }
}
pub(crate) const NVML_LIB: Row<PathBuf> = Row::new(
    "nvml_lib",
    one(&[GPUSPAN_NVML_LIB]),
    "the path of libnvidia-ml.so.1",
    "the system's",
    path,
)
.doc("Where NVML is loaded from.");
pub(crate) const DEVICES: Row<DeviceScope> = Row::new(
    "devices",
    one(&[GPUSPAN_DEVICES]),
    "NVML indexes or GPU-... UUIDs separated by commas",
    "CUDA_VISIBLE_DEVICES, else all",
    device_scope,
)
.doc("The NVIDIA devices in scope.");
pub(crate) const SYSFS_ROOT: Defaulted<PathBuf> = Row::new(
    "sysfs_root",
    one(&[GPUSPAN_SYSFS_ROOT]),
    "a directory laid out as /sys",
    "/sys",
    path,
)
.doc("Where sysfs is, for AMD and Intel GPUs' files.")
.checked(|root| not_a_file(root, "a directory laid out as /sys"))
.defaults_to(|| PathBuf::from("/sys"));
pub(crate) const PROCFS_ROOT: Defaulted<PathBuf> = Row::new(
    "procfs_root",
    one(&[GPUSPAN_PROCFS_ROOT]),
    "a directory laid out as /proc",
    "/proc",
    path,
)
.doc("Where procfs is, for this process's DRM clients.")
.checked(|root| not_a_file(root, "a directory laid out as /proc"))
.defaults_to(|| PathBuf::from("/proc"));

/// A root of the kernel's files: a file there is a mistake said at once (where nothing is
/// there, the sources say what they found missing, as on a machine without those files).
fn not_a_file(root: &std::path::Path, expected: &'static str) -> Result<(), &'static str> {
    match std::fs::metadata(root) {
        Ok(metadata) if !metadata.is_dir() => Err(expected),
        _ => Ok(()),
    }
}

pub(crate) const RUN_DIR: Defaulted<PathBuf> = Row::new(
    "run_dir",
    one(&[GPUSPAN_RUN_DIR]),
    "a directory",
    "gpuspan-runs",
    path,
)
.doc("The parent of run directories.")
.defaults_to(|| PathBuf::from("gpuspan-runs"));
pub(crate) const RUN_ID: Row<String> = Row::new(
    "run_id",
    one(&[GPUSPAN_RUN_ID]),
    RUN_IDS,
    "the job's directory name (see job_id), else date-time-pid",
    text,
)
.doc("The run's id (ml.run.id) and its directory's name.")
.checked(check_run_id);
pub(crate) const JOB_ID: Row<String> = Row::new(
    "job_id",
    one(&[GPUSPAN_JOB_ID]),
    "an id that every rank of the job shares",
    "the launcher's (torchrun, Open MPI, PMIx, PMI, SLURM), else this variable (gpuspan run sets it to its run id)",
    text,
)
.doc("The id every rank of one job shares (ml.job.id), naming the job's directory.");
pub(crate) const ENDPOINT: Row<String> = Row::new(
    "endpoint",
    Vars::PerSignal {
        traces: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT,
        metrics: OTEL_EXPORTER_OTLP_METRICS_ENDPOINT,
        every: OTEL_EXPORTER_OTLP_ENDPOINT,
    },
    URL,
    "none: the run directory",
    url,
)
.doc("The OTLP collector's URL.");
/// The collector's base URL over gRPC when the OTLP exporter is chosen without an endpoint.
pub(crate) const DEFAULT_GRPC_ENDPOINT: &str = "http://localhost:4317";
/// The collector's base URL over HTTP when the OTLP exporter is chosen without an endpoint.
pub(crate) const DEFAULT_HTTP_ENDPOINT: &str = "http://localhost:4318";
pub(crate) const PROTOCOL: Defaulted<Protocol> = Row::new(
    "protocol",
    Vars::PerSignal {
        traces: OTEL_EXPORTER_OTLP_TRACES_PROTOCOL,
        metrics: OTEL_EXPORTER_OTLP_METRICS_PROTOCOL,
        every: OTEL_EXPORTER_OTLP_PROTOCOL,
    },
    PROTOCOLS,
    "http/protobuf",
    parse::protocol,
)
.doc("The OTLP transport.")
.defaults_to(|| Protocol::HttpProtobuf);
pub(crate) const HEADERS: Row<Vec<(String, String)>> = Row::new(
    "headers",
    Vars::PerSignal {
        traces: OTEL_EXPORTER_OTLP_TRACES_HEADERS,
        metrics: OTEL_EXPORTER_OTLP_METRICS_HEADERS,
        every: OTEL_EXPORTER_OTLP_HEADERS,
    },
    KEY_VALUES,
    "none",
    headers,
)
.doc("Headers every OTLP request carries.")
.setter("header");
pub(crate) const TIMEOUT: Defaulted<Duration> = Row::new(
    "timeout",
    Vars::PerSignal {
        traces: OTEL_EXPORTER_OTLP_TRACES_TIMEOUT,
        metrics: OTEL_EXPORTER_OTLP_METRICS_TIMEOUT,
        every: OTEL_EXPORTER_OTLP_TIMEOUT,
    },
    MILLIS,
    "10000",
    millis,
)
.doc("How long one OTLP export may take; shutdown waits at most this long.")
.defaults_to(|| Duration::from_secs(10));
pub(crate) const COMPRESSION: Defaulted<Compression> = Row::new(
    "compression",
    Vars::PerSignal {
        traces: OTEL_EXPORTER_OTLP_TRACES_COMPRESSION,
        metrics: OTEL_EXPORTER_OTLP_METRICS_COMPRESSION,
        every: OTEL_EXPORTER_OTLP_COMPRESSION,
    },
    COMPRESSIONS,
    "none",
    parse::compression,
)
.doc("How OTLP requests are compressed.")
.defaults_to(|| Compression::None);
pub(crate) const CERTIFICATE: Row<PathBuf> = Row::new(
    "certificate",
    Vars::PerSignal {
        traces: OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE,
        metrics: OTEL_EXPORTER_OTLP_METRICS_CERTIFICATE,
        every: OTEL_EXPORTER_OTLP_CERTIFICATE,
    },
    "the PEM file of the CA that signed the endpoint's certificate",
    "the system's roots, else the bundled web roots",
    path,
)
.doc(
    "The CA an https:// endpoint's certificate is checked against, instead of the system's roots.",
);
pub(crate) const CLIENT_CERTIFICATE: Row<PathBuf> = Row::new(
    "client_certificate",
    Vars::PerSignal {
        traces: OTEL_EXPORTER_OTLP_TRACES_CLIENT_CERTIFICATE,
        metrics: OTEL_EXPORTER_OTLP_METRICS_CLIENT_CERTIFICATE,
        every: OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE,
    },
    "the PEM file of this client's certificate (mutual TLS, with client_key)",
    "none",
    path,
)
.doc("This client's certificate, for an endpoint that asks for one (mutual TLS).");
pub(crate) const CLIENT_KEY: Row<PathBuf> = Row::new(
    "client_key",
    Vars::PerSignal {
        traces: OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY,
        metrics: OTEL_EXPORTER_OTLP_METRICS_CLIENT_KEY,
        every: OTEL_EXPORTER_OTLP_CLIENT_KEY,
    },
    "the PEM file of this client's private key (mutual TLS, with client_certificate)",
    "none",
    path,
)
.doc("This client's private key, with its certificate (mutual TLS).");
pub(crate) const INSECURE: Defaulted<bool> = Row::new(
    "insecure",
    Vars::PerSignal {
        traces: OTEL_EXPORTER_OTLP_TRACES_INSECURE,
        metrics: OTEL_EXPORTER_OTLP_METRICS_INSECURE,
        every: OTEL_EXPORTER_OTLP_INSECURE,
    },
    BOOLEAN,
    "false",
    boolean,
)
.doc("Plain text to a gRPC endpoint given as host:port, without a scheme.")
.defaults_to(|| false);
pub(crate) const TRACES_EXPORTER: Row<Exporter> = Row::new(
    "traces_exporter",
    one(&[OTEL_TRACES_EXPORTER]),
    EXPORTERS,
    "otlp with an endpoint, else run_dir",
    exporter,
)
.doc("Where spans go.");
pub(crate) const METRICS_EXPORTER: Row<Exporter> = Row::new(
    "metrics_exporter",
    one(&[OTEL_METRICS_EXPORTER]),
    EXPORTERS,
    "otlp with an endpoint, else run_dir",
    exporter,
)
.doc("Where metric points go.");
pub(crate) const METRIC_EXPORT_INTERVAL: Defaulted<Duration> = Row::new(
    "metric_export_interval",
    one(&[OTEL_METRIC_EXPORT_INTERVAL]),
    MILLIS,
    "60000",
    millis,
)
.doc("Time between two exports of metric points.")
.checked(|interval| {
    if interval.is_zero() {
        Err("a positive number of milliseconds")
    } else {
        Ok(())
    }
})
.defaults_to(|| Duration::from_secs(60));
pub(crate) const PROMETHEUS_ADDR: Row<SocketAddr> = Row::new(
    "prometheus_addr",
    one(&[GPUSPAN_PROMETHEUS_ADDR]),
    LISTEN_ADDR,
    "off",
    listen_addr,
)
.doc("Where a Prometheus scrape endpoint is served.");
pub(crate) const EXPORT_QUEUE: Defaulted<usize> = Row::new(
    "export_queue",
    one(&[GPUSPAN_EXPORT_QUEUE]),
    COUNT,
    "65536",
    count,
)
.doc("Completed spans that may wait while the destination is unreachable.")
.defaults_to(|| super::DEFAULT_EXPORT_QUEUE);
pub(crate) const SUMMARY: Defaulted<bool> =
    Row::new("summary", Vars::CodeOnly, BOOLEAN, "true", boolean)
        .doc("Whether shutdown prints the per-epoch table of a run directory.")
        .defaults_to(|| true);
pub(crate) const FLUSH_ON_SIGNAL: Defaulted<bool> =
    Row::new("flush_on_signal", Vars::CodeOnly, BOOLEAN, "true", boolean)
        .doc("Whether completed spans are flushed on SIGINT and SIGTERM.")
        .defaults_to(|| true);

/// What a run id may be.
const RUN_IDS: &str = "a name without path separators, such as resnet-lr0.1";

/// A run id names a directory: no separators, not `.` or `..`.
pub(crate) fn check_run_id(id: &String) -> Result<(), &'static str> {
    if id.contains(['/', '\\']) || id == "." || id == ".." || id.is_empty() {
        Err(RUN_IDS)
    } else {
        Ok(())
    }
}

fn device_scope(list: &str) -> Result<DeviceScope, InvalidValue> {
    DeviceScope::parse(list).map_err(|why| InvalidValue::new(list, why.to_string()))
}

#[cfg(test)]
mod tests;

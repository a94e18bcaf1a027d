//! The settings table: one row per setting, with its name, the builder setter that sets it
//! in code, the variables that set it from the environment (in precedence order), what
//! its grammar accepts and its default. Diagnosis and the report's pictures keep their
//! rows next to their code; `telemetry::settings` lists them all, for the Python keywords, the
//! guide's configuration table (docs/configuration.md) and the tests that keep those
//! surfaces in step.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use super::error::{InvalidValue, SettingError};
use super::kinds::{COMPRESSIONS, EXPORTERS, PROTOCOLS};
use super::parse::{self, *};
use super::vars::*;
use super::{Compression, Exporter, Protocol};
use crate::source::DeviceScope;

/// One setting, as users see it.
#[derive(Debug, Clone, Copy)]
pub struct Setting {
    /// Its name: the Python keyword.
    pub name: &'static str,
    /// The `Builder` method that sets it in code (beating the variables); empty for a
    /// setting only the environment sets (see [`Setting::in_code`]).
    pub setter: &'static str,
    /// The variables that set it when code does not.
    pub vars: Vars,
    /// What a variable's value may be.
    pub expected: &'static str,
    /// What applies when nothing sets it.
    pub default: &'static str,
}

impl Setting {
    /// Whether code sets it too (a `Builder` setter and a keyword of Python's `init()`),
    /// not only the environment (the PyTorch integration's switches).
    pub fn in_code(&self) -> bool {
        !self.setter.is_empty()
    }
}

/// The variables of a setting, in precedence order.
#[derive(Debug, Clone, Copy)]
pub enum Vars {
    /// None: only code sets it.
    CodeOnly,
    /// The first of these that is set.
    Ordered(&'static [&'static str]),
    /// One per signal, each before the one for every signal.
    PerSignal {
        /// For traces.
        traces: &'static str,
        /// For metrics.
        metrics: &'static str,
        /// For every signal.
        every: &'static str,
    },
}

/// Which signal a setting is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Signal {
    Traces,
    Metrics,
}

impl Vars {
    /// Every variable, in precedence order (per signal: traces', metrics', every signal's).
    pub fn names(&self) -> Vec<&'static str> {
        match *self {
            Vars::CodeOnly => Vec::new(),
            Vars::Ordered(names) => names.to_vec(),
            Vars::PerSignal {
                traces,
                metrics,
                every,
            } => vec![traces, metrics, every],
        }
    }

    /// The variables read for `signal`, first one first.
    pub(crate) fn precedence(&self, signal: Option<Signal>) -> Vec<&'static str> {
        match (*self, signal) {
            (Vars::PerSignal { traces, every, .. }, Some(Signal::Traces)) => vec![traces, every],
            (Vars::PerSignal { metrics, every, .. }, Some(Signal::Metrics)) => {
                vec![metrics, every]
            }
            (Vars::PerSignal { every, .. }, None) => vec![every],
            (vars, _) => vars.names(),
        }
    }
}

/// A setting with its parser and its bounds.
pub(crate) struct Row<T: 'static> {
    pub(crate) setting: Setting,
    /// Reads a variable's text (or text given in code).
    pub(crate) parse: fn(&str) -> Result<T, InvalidValue>,
    /// Bounds every value meets, from code or a variable; `Err` says what would do.
    pub(crate) check: fn(&T) -> Result<(), &'static str>,
}

fn accept<T>(_: &T) -> Result<(), &'static str> {
    Ok(())
}

impl<T> Row<T> {
    pub(crate) const fn new(
        name: &'static str,
        vars: Vars,
        expected: &'static str,
        default: &'static str,
        parse: fn(&str) -> Result<T, InvalidValue>,
    ) -> Self {
        Row {
            setting: Setting {
                name,
                setter: name,
                vars,
                expected,
                default,
            },
            parse,
            check: accept::<T>,
        }
    }

    /// The row with a setter named unlike the setting (one entry per call).
    pub(crate) const fn setter(mut self, setter: &'static str) -> Self {
        self.setting.setter = setter;
        self
    }

    /// The row of a setting only the environment sets: no setter, no Python keyword.
    pub(crate) const fn environment_only(mut self) -> Self {
        self.setting.setter = "";
        self
    }

    /// The row with bounds.
    pub(crate) const fn checked(mut self, check: fn(&T) -> Result<(), &'static str>) -> Self {
        self.check = check;
        self
    }

    /// The row with a value of its own when nothing sets it: `value` gives it, and the
    /// row's default text (what people read) says it, which a unit test holds them to.
    pub(crate) const fn defaults_to(self, value: fn() -> T) -> Defaulted<T> {
        Defaulted { row: self, value }
    }

    /// Parses `text` and checks the bounds.
    pub(crate) fn read(&self, text: &str) -> Result<T, InvalidValue> {
        let value = (self.parse)(text)?;
        (self.check)(&value).map_err(|expected| InvalidValue::new(text, expected))?;
        Ok(value)
    }

    /// Reads text given to the builder, named after the setter.
    pub(crate) fn read_code(&self, text: &str) -> Result<T, SettingError> {
        self.read(text)
            .map_err(|error| error.named(self.setting.setter, text))
    }
}

/// A row whose default is one value: the one definition of that default, which code,
/// the row's default text and the documentation read.
pub(crate) struct Defaulted<T: 'static> {
    pub(crate) row: Row<T>,
    /// The value when neither code nor a variable sets one.
    pub(crate) value: fn() -> T,
}

impl<T> std::ops::Deref for Defaulted<T> {
    type Target = Row<T>;

    fn deref(&self) -> &Row<T> {
        &self.row
    }
}

/// The rows of the settings this module resolves; diagnosis and the pictures keep theirs
/// next to their code, and `telemetry::settings` lists all of them.
pub(crate) const ROWS: &[Setting] = &[
    DISABLED.row.setting,
    SERVICE_NAME.setting,
    RESOURCE_ATTRIBUTES.setting,
    SAMPLE_INTERVAL.row.setting,
    NVML_LIB.setting,
    DEVICES.setting,
    SYSFS_ROOT.row.setting,
    PROCFS_ROOT.row.setting,
    RUN_DIR.row.setting,
    RUN_ID.setting,
    JOB_ID.setting,
    ENDPOINT.setting,
    PROTOCOL.setting,
    HEADERS.setting,
    TIMEOUT.setting,
    COMPRESSION.setting,
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
.defaults_to(|| false);
pub(crate) const SERVICE_NAME: Row<String> = Row::new(
    "service_name",
    one(&[OTEL_SERVICE_NAME]),
    TEXT,
    "service.name of OTEL_RESOURCE_ATTRIBUTES, else unknown_service:<executable>",
    text,
);
pub(crate) const RESOURCE_ATTRIBUTES: Row<Vec<(String, String)>> = Row::new(
    "resource_attributes",
    one(&[OTEL_RESOURCE_ATTRIBUTES]),
    KEY_VALUES,
    "none",
    key_values,
)
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
pub(crate) const NVML_LIB: Row<PathBuf> = Row::new(
    "nvml_lib",
    one(&[GPUSPAN_NVML_LIB]),
    "the path of libnvidia-ml.so.1",
    "the system's",
    path,
);
pub(crate) const DEVICES: Row<DeviceScope> = Row::new(
    "devices",
    one(&[GPUSPAN_DEVICES]),
    "NVML indexes or GPU-... UUIDs separated by commas",
    "CUDA_VISIBLE_DEVICES, else all",
    device_scope,
);
pub(crate) const SYSFS_ROOT: Defaulted<PathBuf> = Row::new(
    "sysfs_root",
    one(&[GPUSPAN_SYSFS_ROOT]),
    "a directory laid out as /sys",
    "/sys",
    path,
)
.defaults_to(|| PathBuf::from("/sys"));
pub(crate) const PROCFS_ROOT: Defaulted<PathBuf> = Row::new(
    "procfs_root",
    one(&[GPUSPAN_PROCFS_ROOT]),
    "a directory laid out as /proc",
    "/proc",
    path,
)
.defaults_to(|| PathBuf::from("/proc"));
pub(crate) const RUN_DIR: Defaulted<PathBuf> = Row::new(
    "run_dir",
    one(&[GPUSPAN_RUN_DIR]),
    "a directory",
    "gpuspan-runs",
    path,
)
.defaults_to(|| PathBuf::from("gpuspan-runs"));
pub(crate) const RUN_ID: Row<String> = Row::new(
    "run_id",
    one(&[GPUSPAN_RUN_ID]),
    RUN_IDS,
    "the job's directory name (see job_id), else date-time-pid",
    text,
)
.checked(check_run_id);
pub(crate) const JOB_ID: Row<String> = Row::new(
    "job_id",
    one(&[GPUSPAN_JOB_ID]),
    "an id that every rank of the job shares",
    "the launcher's (torchrun, Open MPI, PMIx, PMI, SLURM), else this variable (gpuspan run sets it to its run id)",
    text,
);
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
);
pub(crate) const PROTOCOL: Row<Protocol> = Row::new(
    "protocol",
    Vars::PerSignal {
        traces: OTEL_EXPORTER_OTLP_TRACES_PROTOCOL,
        metrics: OTEL_EXPORTER_OTLP_METRICS_PROTOCOL,
        every: OTEL_EXPORTER_OTLP_PROTOCOL,
    },
    PROTOCOLS,
    "http/protobuf",
    parse::protocol,
);
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
.setter("header");
pub(crate) const TIMEOUT: Row<Duration> = Row::new(
    "timeout",
    Vars::PerSignal {
        traces: OTEL_EXPORTER_OTLP_TRACES_TIMEOUT,
        metrics: OTEL_EXPORTER_OTLP_METRICS_TIMEOUT,
        every: OTEL_EXPORTER_OTLP_TIMEOUT,
    },
    MILLIS,
    "10000",
    millis,
);
pub(crate) const COMPRESSION: Row<Compression> = Row::new(
    "compression",
    Vars::PerSignal {
        traces: OTEL_EXPORTER_OTLP_TRACES_COMPRESSION,
        metrics: OTEL_EXPORTER_OTLP_METRICS_COMPRESSION,
        every: OTEL_EXPORTER_OTLP_COMPRESSION,
    },
    COMPRESSIONS,
    "none",
    parse::compression,
);
pub(crate) const TRACES_EXPORTER: Row<Exporter> = Row::new(
    "traces_exporter",
    one(&[OTEL_TRACES_EXPORTER]),
    EXPORTERS,
    "otlp with an endpoint, else run_dir",
    exporter,
);
pub(crate) const METRICS_EXPORTER: Row<Exporter> = Row::new(
    "metrics_exporter",
    one(&[OTEL_METRICS_EXPORTER]),
    EXPORTERS,
    "otlp with an endpoint, else run_dir",
    exporter,
);
pub(crate) const METRIC_EXPORT_INTERVAL: Defaulted<Duration> = Row::new(
    "metric_export_interval",
    one(&[OTEL_METRIC_EXPORT_INTERVAL]),
    MILLIS,
    "60000",
    millis,
)
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
);
pub(crate) const EXPORT_QUEUE: Defaulted<usize> = Row::new(
    "export_queue",
    one(&[GPUSPAN_EXPORT_QUEUE]),
    COUNT,
    "65536",
    count,
)
.defaults_to(|| super::DEFAULT_EXPORT_QUEUE);
pub(crate) const SUMMARY: Defaulted<bool> =
    Row::new("summary", Vars::CodeOnly, BOOLEAN, "true", boolean).defaults_to(|| true);
pub(crate) const FLUSH_ON_SIGNAL: Defaulted<bool> =
    Row::new("flush_on_signal", Vars::CodeOnly, BOOLEAN, "true", boolean).defaults_to(|| true);

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
mod tests {
    use super::*;

    /// Read, but not settings: the sampler is ignored with a warning (see `Sampling`).
    const NOT_SETTINGS: &[&str] = &[OTEL_TRACES_SAMPLER, OTEL_TRACES_SAMPLER_ARG];

    #[test]
    fn every_gpuspan_and_otel_variable_read_is_in_one_row() {
        let in_rows: Vec<&str> = crate::telemetry::settings()
            .flat_map(|s| s.vars.names())
            .collect();
        for var in ALL
            .iter()
            .filter(|v| v.starts_with("GPUSPAN_") || v.starts_with("OTEL_"))
            .filter(|v| !NOT_SETTINGS.contains(v))
        {
            let rows = in_rows.iter().filter(|v| *v == var).count();
            assert_eq!(rows, 1, "{var} is in {rows} rows of the settings table");
        }
        for var in &in_rows {
            assert!(ALL.contains(var), "{var} is not in config::vars");
        }
    }

    /// The default text people read names the value code falls back to.
    fn says_its_default<T: PartialEq + std::fmt::Debug>(row: &Defaulted<T>) {
        let text = row.setting.default;
        assert_eq!(
            row.read(text).ok(),
            Some((row.value)()),
            "{}: the default text {text:?} is not the default value",
            row.setting.name
        );
    }

    #[test]
    fn every_default_text_reads_as_the_default_value() {
        says_its_default(&DISABLED);
        says_its_default(&SAMPLE_INTERVAL);
        says_its_default(&RUN_DIR);
        says_its_default(&METRIC_EXPORT_INTERVAL);
        says_its_default(&EXPORT_QUEUE);
        says_its_default(&SUMMARY);
        says_its_default(&FLUSH_ON_SIGNAL);
    }

    #[test]
    fn a_signal_reads_its_own_variable_before_the_one_for_every_signal() {
        let vars = ENDPOINT.setting.vars;
        assert_eq!(
            vars.precedence(Some(Signal::Metrics)),
            [
                OTEL_EXPORTER_OTLP_METRICS_ENDPOINT,
                OTEL_EXPORTER_OTLP_ENDPOINT
            ]
        );
        assert_eq!(
            vars.precedence(Some(Signal::Traces)),
            [
                OTEL_EXPORTER_OTLP_TRACES_ENDPOINT,
                OTEL_EXPORTER_OTLP_ENDPOINT
            ]
        );
    }

    #[test]
    fn a_switch_takes_the_same_words_in_every_row() {
        let rows = crate::telemetry::settings()
            .filter(|s| s.expected == BOOLEAN)
            .count();
        assert!(rows >= 6, "{rows} switches");
        for (text, value) in [("on", true), ("TRUE", true), ("no", false), (" 0 ", false)] {
            assert_eq!(boolean(text), Ok(value), "{text}");
        }
        let error = DISABLED.read("maybe").unwrap_err().to_string();
        assert!(
            error.contains("\"maybe\"") && error.contains("on or off"),
            "{error}"
        );
    }
}

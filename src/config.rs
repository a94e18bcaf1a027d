//! Settings: code beats environment beats defaults, one resolver per setting.
//!
//! Every environment variable is read here and nowhere else, and a value that does not
//! parse is an error that names the variable, the value and what would be accepted.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::error::InitError;
use crate::source::DeviceScope;

/// Default sampling interval: 5 ms. A spike of 10 ms (two intervals) is always seen, a
/// 200 ms step gets about 40 readings, and the sampler stays under 1% of a core (0.6% with 8
/// devices in BENCHMARKS.md, on the fake NVML; a real driver's read costs more).
pub const DEFAULT_SAMPLE_INTERVAL: Duration = Duration::from_millis(5);

/// Shortest sampling interval accepted.
const MIN_SAMPLE_INTERVAL: Duration = Duration::from_micros(100);

/// Where a signal goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Exporter {
    /// OTLP to a collector (`otlp`).
    Otlp,
    /// OTLP/JSON lines on standard output (`console`).
    Console,
    /// Nowhere (`none`).
    None,
    /// The run directory (`gpuspan-runs/<run-id>/`): the default when no endpoint is set.
    RunDir,
}

/// OTLP transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Protocol {
    /// OTLP over gRPC (`grpc`), port 4317 by convention.
    Grpc,
    /// OTLP over HTTP with protobuf bodies (`http/protobuf`), port 4318 by convention.
    HttpProtobuf,
}

/// Which signal a setting is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Signal {
    Traces,
    Metrics,
}

impl Signal {
    fn upper(self) -> &'static str {
        match self {
            Signal::Traces => "TRACES",
            Signal::Metrics => "METRICS",
        }
    }

    /// The path OTLP/HTTP appends to a base endpoint.
    fn http_path(self) -> &'static str {
        match self {
            Signal::Traces => "/v1/traces",
            Signal::Metrics => "/v1/metrics",
        }
    }
}

/// Values set in code through the builder; `None` falls back to the environment.
#[derive(Debug, Clone, Default)]
pub(crate) struct CodeSettings {
    pub(crate) disabled: Option<bool>,
    pub(crate) service_name: Option<String>,
    pub(crate) resource: Vec<(String, String)>,
    pub(crate) sample_interval: Option<Duration>,
    pub(crate) nvml_lib: Option<PathBuf>,
    pub(crate) devices: Option<String>,
    pub(crate) run_dir: Option<PathBuf>,
    pub(crate) run_id: Option<String>,
    pub(crate) endpoint: Option<String>,
    pub(crate) protocol: Option<Protocol>,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) timeout: Option<Duration>,
    pub(crate) traces_exporter: Option<Exporter>,
    pub(crate) metrics_exporter: Option<Exporter>,
    pub(crate) metric_interval: Option<Duration>,
    pub(crate) prometheus_addr: Option<SocketAddr>,
    pub(crate) summary: Option<bool>,
    pub(crate) flush_on_signal: Option<bool>,
}

/// Where one signal goes, fully resolved.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Destination {
    Otlp(OtlpTarget),
    Console,
    None,
    RunDir,
}

/// An OTLP endpoint for one signal.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct OtlpTarget {
    /// Full URL: for HTTP it includes `/v1/traces` or `/v1/metrics`.
    pub(crate) endpoint: String,
    pub(crate) protocol: Protocol,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) timeout: Duration,
}

/// Launcher-provided position of this process in a distributed run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Rank {
    pub(crate) rank: Option<i64>,
    pub(crate) local_rank: Option<i64>,
    pub(crate) world_size: Option<i64>,
}

/// Every setting, resolved.
#[derive(Debug, Clone)]
pub(crate) struct Settings {
    pub(crate) disabled: bool,
    pub(crate) service_name: String,
    pub(crate) resource: Vec<(String, String)>,
    pub(crate) sample_interval: Duration,
    #[cfg_attr(not(feature = "nvml"), allow(dead_code))]
    pub(crate) nvml_lib: Option<PathBuf>,
    pub(crate) devices: DeviceScope,
    pub(crate) run_root: PathBuf,
    pub(crate) run_id: String,
    pub(crate) rank: Rank,
    pub(crate) traces: Destination,
    pub(crate) metrics: Destination,
    pub(crate) metric_interval: Duration,
    pub(crate) prometheus_addr: Option<SocketAddr>,
    pub(crate) summary: bool,
    pub(crate) flush_on_signal: bool,
}

impl Settings {
    /// The run directory: `<root>/<run-id>`, with one sub-directory per rank when the
    /// launcher says there are several.
    pub(crate) fn run_dir(&self) -> PathBuf {
        let dir = self.run_root.join(&self.run_id);
        match (self.rank.rank, self.rank.world_size) {
            (Some(rank), Some(world)) if world > 1 => dir.join(format!("rank-{rank}")),
            _ => dir,
        }
    }
}

fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

fn invalid(var: &str, value: &str, expected: impl Into<String>) -> InitError {
    InitError::InvalidSetting {
        name: var.to_owned(),
        value: value.to_owned(),
        expected: expected.into(),
    }
}

/// Resolves every setting from code, then environment, then defaults.
pub(crate) fn resolve(code: &CodeSettings) -> Result<Settings, InitError> {
    let disabled = match code.disabled {
        Some(disabled) => disabled,
        None => env_bool("OTEL_SDK_DISABLED")?.unwrap_or(false),
    };
    let resource = resource_attributes(code)?;
    let service_name = code
        .service_name
        .clone()
        .or_else(|| env("OTEL_SERVICE_NAME"))
        .or_else(|| {
            resource
                .iter()
                .find(|(k, _)| k == "service.name")
                .map(|(_, v)| v.clone())
        })
        .unwrap_or_else(default_service_name);
    let sample_interval = match code.sample_interval {
        Some(interval) => check_interval("sample_interval", &format!("{interval:?}"), interval)?,
        None => match env("GPUSPAN_SAMPLE_INTERVAL") {
            Some(value) => {
                let interval = parse_duration(&value).ok_or_else(|| {
                    invalid(
                        "GPUSPAN_SAMPLE_INTERVAL",
                        &value,
                        "a duration such as 5ms, 500us or 1s",
                    )
                })?;
                check_interval("GPUSPAN_SAMPLE_INTERVAL", &value, interval)?
            }
            None => DEFAULT_SAMPLE_INTERVAL,
        },
    };
    let devices = device_scope(code)?;
    let rank = rank()?;
    let run_id = code
        .run_id
        .clone()
        .or_else(|| env("GPUSPAN_RUN_ID"))
        .or_else(|| env("TORCHELASTIC_RUN_ID"))
        .or_else(|| env("SLURM_JOB_ID").map(|job| format!("slurm-{job}")))
        .unwrap_or_else(generated_run_id);
    if run_id.contains(['/', '\\']) || run_id == "." || run_id == ".." {
        return Err(invalid(
            "GPUSPAN_RUN_ID",
            &run_id,
            "a name without path separators, such as resnet-lr0.1",
        ));
    }
    let metric_interval = match code.metric_interval {
        Some(interval) => interval,
        None => env_millis("OTEL_METRIC_EXPORT_INTERVAL")?.unwrap_or(Duration::from_secs(60)),
    };
    if metric_interval.is_zero() {
        return Err(invalid(
            "OTEL_METRIC_EXPORT_INTERVAL",
            "0",
            "a positive number of milliseconds",
        ));
    }
    let prometheus_addr = match code.prometheus_addr {
        Some(addr) => Some(addr),
        None => env("GPUSPAN_PROMETHEUS_ADDR")
            .map(|value| parse_listen_addr(&value))
            .transpose()?,
    };
    Ok(Settings {
        disabled,
        service_name,
        resource,
        sample_interval,
        nvml_lib: code
            .nvml_lib
            .clone()
            .or_else(|| env("GPUSPAN_NVML_LIB").map(PathBuf::from)),
        devices,
        run_root: code
            .run_dir
            .clone()
            .or_else(|| env("GPUSPAN_RUN_DIR").map(PathBuf::from))
            .unwrap_or_else(|| PathBuf::from("gpuspan-runs")),
        run_id,
        rank,
        traces: destination(code, Signal::Traces)?,
        metrics: destination(code, Signal::Metrics)?,
        metric_interval,
        prometheus_addr,
        summary: code.summary.unwrap_or(true),
        flush_on_signal: code.flush_on_signal.unwrap_or(true),
    })
}

fn default_service_name() -> String {
    std::env::current_exe()
        .ok()
        .and_then(|exe| exe.file_stem().map(|s| s.to_string_lossy().into_owned()))
        .map(|name| format!("unknown_service:{name}"))
        .unwrap_or_else(|| "unknown_service".to_owned())
}

fn generated_run_id() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let (date, time) = crate::runlog::utc_date_time(now.as_secs());
    format!("{date}-{time}-{}", std::process::id())
}

fn check_interval(name: &str, given: &str, interval: Duration) -> Result<Duration, InitError> {
    if interval < MIN_SAMPLE_INTERVAL {
        return Err(invalid(
            name,
            given,
            "an interval of at least 100us (the default is 5ms)",
        ));
    }
    Ok(interval)
}

/// Parses `5ms`, `500us`, `1s`, `0.5s`, `2m`; a bare number is milliseconds.
pub(crate) fn parse_duration(text: &str) -> Option<Duration> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: f64 = number.parse().ok()?;
    let seconds = match unit.trim() {
        "" | "ms" => number / 1e3,
        "us" | "µs" => number / 1e6,
        "ns" => number / 1e9,
        "s" => number,
        "m" | "min" => number * 60.0,
        _ => return None,
    };
    (seconds.is_finite() && seconds >= 0.0).then(|| Duration::from_secs_f64(seconds))
}

fn env_bool(var: &str) -> Result<Option<bool>, InitError> {
    match env(var) {
        None => Ok(None),
        Some(value) => match value.trim().to_ascii_lowercase().as_str() {
            "true" | "1" => Ok(Some(true)),
            "false" | "0" => Ok(Some(false)),
            _ => Err(invalid(var, &value, "true or false")),
        },
    }
}

fn env_millis(var: &str) -> Result<Option<Duration>, InitError> {
    match env(var) {
        None => Ok(None),
        Some(value) => value
            .trim()
            .parse::<u64>()
            .map(|ms| Some(Duration::from_millis(ms)))
            .map_err(|_| invalid(var, &value, "a whole number of milliseconds, such as 10000")),
    }
}

fn env_int(var: &str) -> Result<Option<i64>, InitError> {
    match env(var) {
        None => Ok(None),
        Some(value) => value
            .trim()
            .parse::<i64>()
            .map(Some)
            .map_err(|_| invalid(var, &value, "a whole number")),
    }
}

fn parse_listen_addr(value: &str) -> Result<SocketAddr, InitError> {
    let value = value.trim();
    let with_host = if value.starts_with(':') {
        format!("127.0.0.1{value}")
    } else if value.chars().all(|c| c.is_ascii_digit()) {
        format!("127.0.0.1:{value}")
    } else {
        value.to_owned()
    };
    with_host.parse().map_err(|_| {
        invalid(
            "GPUSPAN_PROMETHEUS_ADDR",
            value,
            "a port (9464) or an address with a port (127.0.0.1:9464)",
        )
    })
}

fn rank() -> Result<Rank, InitError> {
    let first = |vars: [&str; 2]| -> Result<Option<i64>, InitError> {
        for var in vars {
            if let Some(value) = env_int(var)? {
                return Ok(Some(value));
            }
        }
        Ok(None)
    };
    Ok(Rank {
        rank: first(["RANK", "SLURM_PROCID"])?,
        local_rank: first(["LOCAL_RANK", "SLURM_LOCALID"])?,
        world_size: first(["WORLD_SIZE", "SLURM_NTASKS"])?,
    })
}

fn device_scope(code: &CodeSettings) -> Result<DeviceScope, InitError> {
    if let Some(list) = &code.devices {
        return DeviceScope::parse(list).map_err(|why| invalid("devices", list, why));
    }
    if let Some(list) = std::env::var("GPUSPAN_DEVICES")
        .ok()
        .filter(|v| !v.is_empty())
    {
        return DeviceScope::parse(&list).map_err(|why| invalid("GPUSPAN_DEVICES", &list, why));
    }
    // Unlike the others, an empty CUDA_VISIBLE_DEVICES means "no device".
    match std::env::var("CUDA_VISIBLE_DEVICES") {
        Ok(list) => {
            DeviceScope::parse(&list).map_err(|why| invalid("CUDA_VISIBLE_DEVICES", &list, why))
        }
        Err(_) => Ok(DeviceScope::all()),
    }
}

/// `OTEL_RESOURCE_ATTRIBUTES` (`key=value,key=value`, values percent-encoded), then code.
fn resource_attributes(code: &CodeSettings) -> Result<Vec<(String, String)>, InitError> {
    let mut attributes = match env("OTEL_RESOURCE_ATTRIBUTES") {
        Some(value) => parse_key_values(&value)
            .map_err(|why| invalid("OTEL_RESOURCE_ATTRIBUTES", &value, why))?,
        None => Vec::new(),
    };
    for (key, value) in &code.resource {
        attributes.retain(|(k, _)| k != key);
        attributes.push((key.clone(), value.clone()));
    }
    Ok(attributes)
}

/// Parses the W3C-baggage-like lists of `OTEL_RESOURCE_ATTRIBUTES` and `*_HEADERS`.
pub(crate) fn parse_key_values(text: &str) -> Result<Vec<(String, String)>, String> {
    let mut pairs = Vec::new();
    for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let Some((key, value)) = item.split_once('=') else {
            return Err(format!(
                "'{item}' is not key=value; expected key1=value1,key2=value2"
            ));
        };
        let key = key.trim();
        if key.is_empty() {
            return Err(format!("'{item}' has an empty key"));
        }
        let value = percent_decode(value.trim())
            .ok_or_else(|| format!("'{item}' has a broken %-escape in its value"))?;
        pairs.push((key.to_owned(), value));
    }
    Ok(pairs)
}

fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = text.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

fn exporter_choice(code: Option<Exporter>, signal: Signal) -> Result<Option<Exporter>, InitError> {
    if code.is_some() {
        return Ok(code);
    }
    let var = format!("OTEL_{}_EXPORTER", signal.upper());
    match env(&var) {
        None => Ok(None),
        Some(value) => match value.trim() {
            "otlp" => Ok(Some(Exporter::Otlp)),
            "console" => Ok(Some(Exporter::Console)),
            "none" => Ok(Some(Exporter::None)),
            _ => Err(invalid(&var, &value, "otlp, console or none")),
        },
    }
}

fn destination(code: &CodeSettings, signal: Signal) -> Result<Destination, InitError> {
    let choice = match signal {
        Signal::Traces => exporter_choice(code.traces_exporter, signal)?,
        Signal::Metrics => exporter_choice(code.metrics_exporter, signal)?,
    };
    let signal_endpoint_var = format!("OTEL_EXPORTER_OTLP_{}_ENDPOINT", signal.upper());
    let signal_endpoint = env(&signal_endpoint_var);
    let base_endpoint =
        code.endpoint.clone().map(|e| (e, "endpoint")).or_else(|| {
            env("OTEL_EXPORTER_OTLP_ENDPOINT").map(|e| (e, "OTEL_EXPORTER_OTLP_ENDPOINT"))
        });
    let has_endpoint = signal_endpoint.is_some() || base_endpoint.is_some();
    let exporter = choice.unwrap_or(if has_endpoint {
        Exporter::Otlp
    } else {
        Exporter::RunDir
    });
    match exporter {
        Exporter::Console => return Ok(Destination::Console),
        Exporter::None => return Ok(Destination::None),
        Exporter::RunDir => return Ok(Destination::RunDir),
        Exporter::Otlp => {}
    }
    let protocol = match code.protocol {
        Some(protocol) => protocol,
        None => {
            let signal_var = format!("OTEL_EXPORTER_OTLP_{}_PROTOCOL", signal.upper());
            match env(&signal_var)
                .map(|v| (v, signal_var.clone()))
                .or_else(|| {
                    env("OTEL_EXPORTER_OTLP_PROTOCOL")
                        .map(|v| (v, "OTEL_EXPORTER_OTLP_PROTOCOL".to_owned()))
                }) {
                None => Protocol::HttpProtobuf,
                Some((value, var)) => match value.trim() {
                    "grpc" => Protocol::Grpc,
                    "http/protobuf" => Protocol::HttpProtobuf,
                    "http/json" => {
                        return Err(invalid(
                            &var,
                            &value,
                            "grpc or http/protobuf (http/json is not supported)",
                        ))
                    }
                    _ => return Err(invalid(&var, &value, "grpc or http/protobuf")),
                },
            }
        }
    };
    let endpoint = match (code.endpoint.is_some(), signal_endpoint) {
        // A per-signal endpoint from the environment is used as is, unless code set one.
        (false, Some(endpoint)) => {
            check_url(&signal_endpoint_var, &endpoint)?;
            endpoint
        }
        _ => {
            let (base, var) = base_endpoint.unwrap_or_else(|| {
                let default = match protocol {
                    Protocol::Grpc => "http://localhost:4317",
                    Protocol::HttpProtobuf => "http://localhost:4318",
                };
                (default.to_owned(), "default")
            });
            check_url(var, &base)?;
            match protocol {
                Protocol::Grpc => base,
                Protocol::HttpProtobuf => {
                    format!("{}{}", base.trim_end_matches('/'), signal.http_path())
                }
            }
        }
    };
    let headers_var = format!("OTEL_EXPORTER_OTLP_{}_HEADERS", signal.upper());
    let mut headers = match env(&headers_var)
        .map(|v| (v, headers_var.clone()))
        .or_else(|| {
            env("OTEL_EXPORTER_OTLP_HEADERS").map(|v| (v, "OTEL_EXPORTER_OTLP_HEADERS".into()))
        }) {
        Some((value, var)) => parse_key_values(&value).map_err(|why| invalid(&var, &value, why))?,
        None => Vec::new(),
    };
    for (key, value) in &code.headers {
        headers.retain(|(k, _)| !k.eq_ignore_ascii_case(key));
        headers.push((key.clone(), value.clone()));
    }
    let timeout = match code.timeout {
        Some(timeout) => timeout,
        None => {
            let signal_var = format!("OTEL_EXPORTER_OTLP_{}_TIMEOUT", signal.upper());
            match env_millis(&signal_var)? {
                Some(timeout) => timeout,
                None => {
                    env_millis("OTEL_EXPORTER_OTLP_TIMEOUT")?.unwrap_or(Duration::from_secs(10))
                }
            }
        }
    };
    Ok(Destination::Otlp(OtlpTarget {
        endpoint,
        protocol,
        headers,
        timeout,
    }))
}

fn check_url(var: &str, url: &str) -> Result<(), InitError> {
    let ok =
        (url.starts_with("http://") || url.starts_with("https://")) && url.len() > "https://".len();
    if ok {
        Ok(())
    } else {
        Err(invalid(
            var,
            url,
            "a URL such as http://localhost:4317 (gRPC) or http://localhost:4318 (HTTP)",
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every variable this module reads, cleared so the machine's environment cannot leak in.
    const VARS: &[&str] = &[
        "OTEL_SDK_DISABLED",
        "OTEL_SERVICE_NAME",
        "OTEL_RESOURCE_ATTRIBUTES",
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
        "OTEL_EXPORTER_OTLP_PROTOCOL",
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
        "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL",
        "OTEL_EXPORTER_OTLP_HEADERS",
        "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
        "OTEL_EXPORTER_OTLP_METRICS_HEADERS",
        "OTEL_EXPORTER_OTLP_TIMEOUT",
        "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
        "OTEL_EXPORTER_OTLP_METRICS_TIMEOUT",
        "OTEL_TRACES_EXPORTER",
        "OTEL_METRICS_EXPORTER",
        "OTEL_METRIC_EXPORT_INTERVAL",
        "GPUSPAN_SAMPLE_INTERVAL",
        "GPUSPAN_NVML_LIB",
        "GPUSPAN_DEVICES",
        "CUDA_VISIBLE_DEVICES",
        "GPUSPAN_RUN_DIR",
        "GPUSPAN_RUN_ID",
        "TORCHELASTIC_RUN_ID",
        "SLURM_JOB_ID",
        "GPUSPAN_PROMETHEUS_ADDR",
        "RANK",
        "LOCAL_RANK",
        "WORLD_SIZE",
        "SLURM_PROCID",
        "SLURM_LOCALID",
        "SLURM_NTASKS",
    ];

    fn with_env<R>(vars: &[(&str, &str)], f: impl FnOnce() -> R) -> R {
        let mut all: Vec<(&str, Option<&str>)> = VARS.iter().map(|v| (*v, None)).collect();
        for (key, value) in vars {
            all.retain(|(k, _)| k != key);
            all.push((key, Some(value)));
        }
        temp_env::with_vars(all, f)
    }

    fn otlp(destination: &Destination) -> &OtlpTarget {
        match destination {
            Destination::Otlp(target) => target,
            other => panic!("expected OTLP, got {other:?}"),
        }
    }

    fn error_text(vars: &[(&str, &str)]) -> String {
        with_env(vars, || resolve(&CodeSettings::default()))
            .expect_err("the value is rejected")
            .to_string()
    }

    #[test]
    fn defaults_write_a_run_directory() {
        let settings = with_env(&[], || resolve(&CodeSettings::default())).unwrap();
        assert!(!settings.disabled);
        assert_eq!(settings.traces, Destination::RunDir);
        assert_eq!(settings.metrics, Destination::RunDir);
        assert_eq!(settings.sample_interval, DEFAULT_SAMPLE_INTERVAL);
        assert_eq!(settings.run_root, PathBuf::from("gpuspan-runs"));
        assert_eq!(settings.metric_interval, Duration::from_secs(60));
        assert_eq!(settings.devices, DeviceScope::all());
        assert!(settings.service_name.starts_with("unknown_service:"));
    }

    #[test]
    fn env_beats_defaults_and_code_beats_env() {
        let env = [
            ("OTEL_SERVICE_NAME", "from-env"),
            ("GPUSPAN_SAMPLE_INTERVAL", "2ms"),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://env:4318"),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "2500"),
            (
                "OTEL_EXPORTER_OTLP_HEADERS",
                "x-team=ml,authorization=Bearer%20abc",
            ),
            ("GPUSPAN_RUN_ID", "env-run"),
        ];
        let from_env = with_env(&env, || resolve(&CodeSettings::default())).unwrap();
        assert_eq!(from_env.service_name, "from-env");
        assert_eq!(from_env.sample_interval, Duration::from_millis(2));
        assert_eq!(from_env.run_id, "env-run");
        let traces = otlp(&from_env.traces);
        assert_eq!(traces.endpoint, "http://env:4318/v1/traces");
        assert_eq!(traces.protocol, Protocol::HttpProtobuf);
        assert_eq!(traces.timeout, Duration::from_millis(2500));
        assert_eq!(
            traces.headers,
            vec![
                ("x-team".to_owned(), "ml".to_owned()),
                ("authorization".to_owned(), "Bearer abc".to_owned())
            ]
        );
        assert_eq!(
            otlp(&from_env.metrics).endpoint,
            "http://env:4318/v1/metrics"
        );

        let code = CodeSettings {
            service_name: Some("from-code".into()),
            sample_interval: Some(Duration::from_millis(1)),
            endpoint: Some("http://code:4317".into()),
            protocol: Some(Protocol::Grpc),
            timeout: Some(Duration::from_secs(1)),
            headers: vec![("x-team".into(), "infra".into())],
            run_id: Some("code-run".into()),
            ..CodeSettings::default()
        };
        let from_code = with_env(&env, || resolve(&code)).unwrap();
        assert_eq!(from_code.service_name, "from-code");
        assert_eq!(from_code.sample_interval, Duration::from_millis(1));
        assert_eq!(from_code.run_id, "code-run");
        let traces = otlp(&from_code.traces);
        assert_eq!(
            traces.endpoint, "http://code:4317",
            "gRPC takes the endpoint as is"
        );
        assert_eq!(traces.protocol, Protocol::Grpc);
        assert_eq!(traces.timeout, Duration::from_secs(1));
        assert!(traces.headers.contains(&("x-team".into(), "infra".into())));
        assert!(!traces.headers.contains(&("x-team".into(), "ml".into())));
    }

    #[test]
    fn per_signal_settings_beat_the_general_ones() {
        let env = [
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://all:4318/"),
            (
                "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
                "http://metrics:9090/custom",
            ),
            ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "grpc"),
            ("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "700"),
        ];
        let settings = with_env(&env, || resolve(&CodeSettings::default())).unwrap();
        let traces = otlp(&settings.traces);
        assert_eq!(traces.protocol, Protocol::Grpc);
        assert_eq!(traces.endpoint, "http://all:4318/");
        assert_eq!(traces.timeout, Duration::from_millis(700));
        let metrics = otlp(&settings.metrics);
        assert_eq!(metrics.endpoint, "http://metrics:9090/custom", "used as is");
        assert_eq!(metrics.timeout, Duration::from_secs(10));
    }

    #[test]
    fn exporters_can_be_chosen_per_signal() {
        let env = [
            ("OTEL_TRACES_EXPORTER", "console"),
            ("OTEL_METRICS_EXPORTER", "none"),
        ];
        let settings = with_env(&env, || resolve(&CodeSettings::default())).unwrap();
        assert_eq!(settings.traces, Destination::Console);
        assert_eq!(settings.metrics, Destination::None);
        let env = [("OTEL_TRACES_EXPORTER", "otlp")];
        let settings = with_env(&env, || resolve(&CodeSettings::default())).unwrap();
        assert_eq!(
            otlp(&settings.traces).endpoint,
            "http://localhost:4318/v1/traces"
        );
        assert_eq!(settings.metrics, Destination::RunDir);
    }

    #[test]
    fn launcher_variables_give_rank_and_a_per_rank_directory() {
        let env = [
            ("RANK", "3"),
            ("LOCAL_RANK", "1"),
            ("WORLD_SIZE", "8"),
            ("TORCHELASTIC_RUN_ID", "job42"),
        ];
        let settings = with_env(&env, || resolve(&CodeSettings::default())).unwrap();
        assert_eq!(
            settings.rank,
            Rank {
                rank: Some(3),
                local_rank: Some(1),
                world_size: Some(8)
            }
        );
        assert_eq!(
            settings.run_dir(),
            PathBuf::from("gpuspan-runs/job42/rank-3")
        );
        let slurm = [
            ("SLURM_PROCID", "5"),
            ("SLURM_NTASKS", "16"),
            ("SLURM_JOB_ID", "777"),
        ];
        let settings = with_env(&slurm, || resolve(&CodeSettings::default())).unwrap();
        assert_eq!(settings.rank.rank, Some(5));
        assert_eq!(settings.run_id, "slurm-777");
    }

    #[test]
    fn device_scope_prefers_gpuspan_devices_over_cuda_visible_devices() {
        let env = [("GPUSPAN_DEVICES", "1"), ("CUDA_VISIBLE_DEVICES", "0")];
        let settings = with_env(&env, || resolve(&CodeSettings::default())).unwrap();
        assert_eq!(settings.devices, DeviceScope::parse("1").unwrap());
        let env = [("CUDA_VISIBLE_DEVICES", "")];
        let settings = with_env(&env, || resolve(&CodeSettings::default())).unwrap();
        assert_eq!(
            settings.devices,
            DeviceScope::parse("").unwrap(),
            "empty means none"
        );
    }

    #[test]
    fn invalid_values_name_the_variable_and_the_value() {
        let cases: &[(&str, &str, &str)] = &[
            ("GPUSPAN_SAMPLE_INTERVAL", "fast", "5ms"),
            ("GPUSPAN_SAMPLE_INTERVAL", "10us", "at least 100us"),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "10s", "milliseconds"),
            (
                "OTEL_EXPORTER_OTLP_PROTOCOL",
                "udp",
                "grpc or http/protobuf",
            ),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json", "not supported"),
            ("OTEL_TRACES_EXPORTER", "jaeger", "otlp, console or none"),
            ("OTEL_SDK_DISABLED", "maybe", "true or false"),
            ("OTEL_METRIC_EXPORT_INTERVAL", "-1", "milliseconds"),
            ("OTEL_RESOURCE_ATTRIBUTES", "team", "key=value"),
            (
                "OTEL_EXPORTER_OTLP_ENDPOINT",
                "collector:4317",
                "http://localhost:4317",
            ),
            ("GPUSPAN_DEVICES", "cuda:0", "'cuda:0'"),
            ("GPUSPAN_PROMETHEUS_ADDR", "everywhere", "127.0.0.1:9464"),
            ("WORLD_SIZE", "eight", "whole number"),
            ("GPUSPAN_RUN_ID", "../escape", "without path separators"),
        ];
        for (var, value, hint) in cases {
            let mut env = vec![(*var, *value)];
            if var.starts_with("OTEL_EXPORTER_OTLP_P") || var.ends_with("TIMEOUT") {
                env.push(("OTEL_TRACES_EXPORTER", "otlp"));
            }
            let text = error_text(&env);
            assert!(text.contains(var), "{var}: {text}");
            assert!(text.contains(value), "{var}: {text}");
            assert!(
                text.contains(hint),
                "{var}: expected a hint '{hint}' in: {text}"
            );
        }
    }

    #[test]
    fn durations_take_units() {
        assert_eq!(parse_duration("5ms"), Some(Duration::from_millis(5)));
        assert_eq!(parse_duration("500us"), Some(Duration::from_micros(500)));
        assert_eq!(parse_duration("0.5s"), Some(Duration::from_millis(500)));
        assert_eq!(parse_duration("7"), Some(Duration::from_millis(7)));
        assert_eq!(parse_duration("2m"), Some(Duration::from_secs(120)));
        assert_eq!(parse_duration("5 parsecs"), None);
        assert_eq!(parse_duration(""), None);
    }

    #[test]
    fn prometheus_addresses_default_to_loopback() {
        let settings = with_env(&[("GPUSPAN_PROMETHEUS_ADDR", "9464")], || {
            resolve(&CodeSettings::default())
        })
        .unwrap();
        assert_eq!(
            settings.prometheus_addr,
            Some("127.0.0.1:9464".parse().unwrap())
        );
        let settings = with_env(&[("GPUSPAN_PROMETHEUS_ADDR", "0.0.0.0:9000")], || {
            resolve(&CodeSettings::default())
        })
        .unwrap();
        assert_eq!(
            settings.prometheus_addr,
            Some("0.0.0.0:9000".parse().unwrap())
        );
    }
}

//! Settings, resolved once: code, then the signal's own variable, then the variable for
//! every signal, then the default.
//!
//! Every environment variable is read here and nowhere else (names in [`vars`]), and a
//! value that does not parse is an error that names the variable, the value and what would
//! be accepted. What is resolved here is final: exporters are built so that nothing reads
//! the environment again.

mod layered;
pub(crate) mod parse;
pub(crate) mod vars;

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::error::InitError;
use crate::source::DeviceScope;
use layered::{env, layered, Origin};

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

/// OTLP request compression.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Compression {
    /// gzip (`gzip`).
    Gzip,
    /// None (`none`): the default.
    None,
}

/// How gpuspan's spans are sampled: always. The per-epoch summary, the leak rules, the
/// batch-size fit and the peaks are computed from the spans that end, so a span sampled out
/// would silently drop a step from all of them. Of `OTEL_TRACES_SAMPLER`, `always_on` and
/// `parentbased_always_on` (the default) are taken; anything else is ignored, with one
/// warning at start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Sampling {
    /// Every span, whatever its parent decided (`always_on`).
    AlwaysOn,
    /// A root span is always sampled, a child follows its parent (`parentbased_always_on`).
    ParentBasedAlwaysOn {
        /// A sampler named in the environment and ignored (`name` or `name (arg)`).
        ignored: Option<String>,
    },
}

impl Sampling {
    /// The SDK sampler, always given so that the SDK does not read the variable itself.
    pub(crate) fn sampler(&self) -> opentelemetry_sdk::trace::Sampler {
        use opentelemetry_sdk::trace::Sampler;
        match self {
            Sampling::AlwaysOn => Sampler::AlwaysOn,
            Sampling::ParentBasedAlwaysOn { .. } => {
                Sampler::ParentBased(Box::new(Sampler::AlwaysOn))
            }
        }
    }

    /// The one warning line for an ignored sampler.
    pub(crate) fn warning(&self) -> Option<String> {
        let Sampling::ParentBasedAlwaysOn {
            ignored: Some(sampler),
        } = self
        else {
            return None;
        };
        Some(format!(
            "gpuspan: warning: {var}={sampler} is ignored: gpuspan keeps every span, because \
             the peaks, the per-epoch summary, the leak rules and the batch-size fit need every \
             step; sample in the collector instead, or unset {var}",
            var = vars::OTEL_TRACES_SAMPLER
        ))
    }
}

/// Which signal a setting is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Signal {
    Traces,
    Metrics,
}

/// The variables of one signal: its own first, then the one for every signal.
struct SignalVars {
    endpoint: [&'static str; 2],
    protocol: [&'static str; 2],
    headers: [&'static str; 2],
    timeout: [&'static str; 2],
    compression: [&'static str; 2],
    exporter: &'static str,
    /// The path OTLP/HTTP appends to a base endpoint.
    http_path: &'static str,
}

impl Signal {
    fn vars(self) -> SignalVars {
        use vars::*;
        match self {
            Signal::Traces => SignalVars {
                endpoint: [
                    OTEL_EXPORTER_OTLP_TRACES_ENDPOINT,
                    OTEL_EXPORTER_OTLP_ENDPOINT,
                ],
                protocol: [
                    OTEL_EXPORTER_OTLP_TRACES_PROTOCOL,
                    OTEL_EXPORTER_OTLP_PROTOCOL,
                ],
                headers: [
                    OTEL_EXPORTER_OTLP_TRACES_HEADERS,
                    OTEL_EXPORTER_OTLP_HEADERS,
                ],
                timeout: [
                    OTEL_EXPORTER_OTLP_TRACES_TIMEOUT,
                    OTEL_EXPORTER_OTLP_TIMEOUT,
                ],
                compression: [
                    OTEL_EXPORTER_OTLP_TRACES_COMPRESSION,
                    OTEL_EXPORTER_OTLP_COMPRESSION,
                ],
                exporter: OTEL_TRACES_EXPORTER,
                http_path: "/v1/traces",
            },
            Signal::Metrics => SignalVars {
                endpoint: [
                    OTEL_EXPORTER_OTLP_METRICS_ENDPOINT,
                    OTEL_EXPORTER_OTLP_ENDPOINT,
                ],
                protocol: [
                    OTEL_EXPORTER_OTLP_METRICS_PROTOCOL,
                    OTEL_EXPORTER_OTLP_PROTOCOL,
                ],
                headers: [
                    OTEL_EXPORTER_OTLP_METRICS_HEADERS,
                    OTEL_EXPORTER_OTLP_HEADERS,
                ],
                timeout: [
                    OTEL_EXPORTER_OTLP_METRICS_TIMEOUT,
                    OTEL_EXPORTER_OTLP_TIMEOUT,
                ],
                compression: [
                    OTEL_EXPORTER_OTLP_METRICS_COMPRESSION,
                    OTEL_EXPORTER_OTLP_COMPRESSION,
                ],
                exporter: OTEL_METRICS_EXPORTER,
                http_path: "/v1/metrics",
            },
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
    pub(crate) compression: Option<Compression>,
    pub(crate) traces_exporter: Option<Exporter>,
    pub(crate) metrics_exporter: Option<Exporter>,
    pub(crate) metric_interval: Option<Duration>,
    pub(crate) prometheus_addr: Option<SocketAddr>,
    pub(crate) export_queue: Option<usize>,
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

impl Destination {
    /// How long one export may take: the OTLP timeout, or a few seconds for local files.
    pub(crate) fn timeout(&self) -> Duration {
        match self {
            Destination::Otlp(target) => target.timeout,
            _ => Duration::from_secs(5),
        }
    }
}

/// An OTLP endpoint for one signal, with everything the exporter sends.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct OtlpTarget {
    /// Full URL: for HTTP it includes `/v1/traces` or `/v1/metrics`.
    pub(crate) endpoint: String,
    pub(crate) protocol: Protocol,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) timeout: Duration,
    pub(crate) compression: Compression,
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
    /// Where `nvidia-smi` is looked for (`PATH`).
    pub(crate) search_path: Option<OsString>,
    pub(crate) run_root: PathBuf,
    pub(crate) run_id: String,
    pub(crate) rank: Rank,
    pub(crate) traces: Destination,
    pub(crate) metrics: Destination,
    pub(crate) metric_interval: Duration,
    pub(crate) prometheus_addr: Option<SocketAddr>,
    /// Completed spans that may wait for the destination.
    pub(crate) export_queue: usize,
    /// The event layer's filter (`RUST_LOG`), checked.
    pub(crate) log_filter: Option<String>,
    pub(crate) summary: bool,
    pub(crate) flush_on_signal: bool,
    pub(crate) sampling: Sampling,
}

/// Default number of completed spans that may wait for an unreachable destination: a few
/// minutes of 100 steps a second, about 60 MiB at most.
pub(crate) const DEFAULT_EXPORT_QUEUE: usize = 65_536;

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

/// Where `gpuspan report` looks for runs: `GPUSPAN_RUN_DIR`, else `gpuspan-runs`.
pub fn default_run_root() -> PathBuf {
    env(vars::GPUSPAN_RUN_DIR).map_or_else(|| PathBuf::from("gpuspan-runs"), PathBuf::from)
}

fn invalid(name: &str, value: &str, expected: impl Into<String>) -> InitError {
    InitError::InvalidSetting {
        name: name.to_owned(),
        value: value.to_owned(),
        expected: expected.into(),
    }
}

/// Resolves every setting from code, then environment, then defaults.
pub(crate) fn resolve(code: &CodeSettings) -> Result<Settings, InitError> {
    use vars::*;
    let disabled = layered(
        code.disabled,
        "disabled",
        &[OTEL_SDK_DISABLED],
        parse::boolean,
    )?;
    let resource = resource_attributes(code)?;
    let service_name = code
        .service_name
        .clone()
        .or_else(|| env(OTEL_SERVICE_NAME))
        .or_else(|| {
            resource
                .iter()
                .find(|(k, _)| k == "service.name")
                .map(|(_, v)| v.clone())
        })
        .unwrap_or_else(default_service_name);
    let sample_interval = layered(
        code.sample_interval,
        "sample_interval",
        &[GPUSPAN_SAMPLE_INTERVAL],
        parse::duration,
    )?
    .map(|(interval, origin)| check_interval(interval, &origin))
    .transpose()?
    .unwrap_or(DEFAULT_SAMPLE_INTERVAL);
    let devices = device_scope(code)?;
    let rank = rank()?;
    let run_id = code
        .run_id
        .clone()
        .or_else(|| env(GPUSPAN_RUN_ID))
        .or_else(|| env(TORCHELASTIC_RUN_ID))
        .or_else(|| env(SLURM_JOB_ID).map(|job| format!("slurm-{job}")))
        .unwrap_or_else(generated_run_id);
    if run_id.contains(['/', '\\']) || run_id == "." || run_id == ".." || run_id.is_empty() {
        return Err(invalid(
            GPUSPAN_RUN_ID,
            &run_id,
            "a name without path separators, such as resnet-lr0.1",
        ));
    }
    let (metric_interval, origin) = layered(
        code.metric_interval,
        "metric_export_interval",
        &[OTEL_METRIC_EXPORT_INTERVAL],
        parse::millis,
    )?
    .unwrap_or((Duration::from_secs(60), Origin::Default));
    if metric_interval.is_zero() {
        return Err(invalid(
            origin.name(OTEL_METRIC_EXPORT_INTERVAL),
            "0",
            "a positive number of milliseconds",
        ));
    }
    let prometheus_addr = layered(
        code.prometheus_addr,
        "prometheus_addr",
        &[GPUSPAN_PROMETHEUS_ADDR],
        parse::listen_addr,
    )?
    .map(|(addr, _)| addr);
    let export_queue = layered(
        code.export_queue,
        "export_queue",
        &[GPUSPAN_EXPORT_QUEUE],
        parse::count,
    )?
    .map_or(DEFAULT_EXPORT_QUEUE, |(n, _)| n.max(1));
    let log_filter = match env(RUST_LOG) {
        Some(filter) => match tracing_subscriber::EnvFilter::try_new(&filter) {
            Ok(_) => Some(filter),
            Err(e) => {
                return Err(invalid(
                    RUST_LOG,
                    &filter,
                    format!("a tracing filter such as info or mycrate=debug ({e})"),
                ))
            }
        },
        None => None,
    };
    Ok(Settings {
        disabled: disabled.is_some_and(|(d, _)| d),
        service_name,
        resource,
        sample_interval,
        nvml_lib: code
            .nvml_lib
            .clone()
            .or_else(|| env(GPUSPAN_NVML_LIB).map(PathBuf::from)),
        devices,
        search_path: std::env::var_os(PATH),
        run_root: code.run_dir.clone().unwrap_or_else(default_run_root),
        run_id,
        rank,
        traces: destination(code, Signal::Traces)?,
        metrics: destination(code, Signal::Metrics)?,
        metric_interval,
        prometheus_addr,
        export_queue,
        log_filter,
        summary: code.summary.unwrap_or(true),
        flush_on_signal: code.flush_on_signal.unwrap_or(true),
        sampling: sampling(),
    })
}

/// `OTEL_TRACES_SAMPLER`, see [`Sampling`]. Never an error: whatever it says, gpuspan
/// samples every span.
fn sampling() -> Sampling {
    let Some(sampler) = env(vars::OTEL_TRACES_SAMPLER) else {
        return Sampling::ParentBasedAlwaysOn { ignored: None };
    };
    let sampler = sampler.trim();
    match sampler {
        "always_on" => Sampling::AlwaysOn,
        "parentbased_always_on" => Sampling::ParentBasedAlwaysOn { ignored: None },
        _ => {
            let shown = match env(vars::OTEL_TRACES_SAMPLER_ARG) {
                Some(arg) if sampler.ends_with("traceidratio") => {
                    format!(
                        "{sampler} ({}={})",
                        vars::OTEL_TRACES_SAMPLER_ARG,
                        arg.trim()
                    )
                }
                _ => sampler.to_owned(),
            };
            Sampling::ParentBasedAlwaysOn {
                ignored: Some(shown),
            }
        }
    }
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
    let (date, time) = crate::util::time::utc_date_time(now.as_secs());
    format!("{date}-{time}-{}", std::process::id())
}

fn check_interval(interval: Duration, origin: &Origin) -> Result<Duration, InitError> {
    if interval < MIN_SAMPLE_INTERVAL {
        return Err(invalid(
            origin.name(vars::GPUSPAN_SAMPLE_INTERVAL),
            &origin.value(&format!("{interval:?}")),
            "an interval of at least 100us (the default is 5ms)",
        ));
    }
    Ok(interval)
}

fn rank() -> Result<Rank, InitError> {
    use vars::*;
    let first = |vars: [&'static str; 2]| -> Result<Option<i64>, InitError> {
        Ok(layered(None, "", &vars, parse::integer)?.map(|(v, _)| v))
    };
    Ok(Rank {
        rank: first([RANK, SLURM_PROCID])?,
        local_rank: first([LOCAL_RANK, SLURM_LOCALID])?,
        world_size: first([WORLD_SIZE, SLURM_NTASKS])?,
    })
}

fn device_scope(code: &CodeSettings) -> Result<DeviceScope, InitError> {
    if let Some(list) = &code.devices {
        return DeviceScope::parse(list).map_err(|why| invalid("devices", list, why));
    }
    if let Some(list) = env(vars::GPUSPAN_DEVICES) {
        return DeviceScope::parse(&list).map_err(|why| invalid(vars::GPUSPAN_DEVICES, &list, why));
    }
    // Unlike the others, an empty CUDA_VISIBLE_DEVICES means "no device".
    match std::env::var(vars::CUDA_VISIBLE_DEVICES) {
        Ok(list) => {
            DeviceScope::parse(&list).map_err(|why| invalid(vars::CUDA_VISIBLE_DEVICES, &list, why))
        }
        Err(_) => Ok(DeviceScope::all()),
    }
}

/// `OTEL_RESOURCE_ATTRIBUTES` (`key=value,key=value`, values percent-encoded), then code.
fn resource_attributes(code: &CodeSettings) -> Result<Vec<(String, String)>, InitError> {
    let mut attributes = layered(
        None,
        "",
        &[vars::OTEL_RESOURCE_ATTRIBUTES],
        parse::key_values,
    )?
    .map(|(v, _)| v)
    .unwrap_or_default();
    for (key, value) in &code.resource {
        attributes.retain(|(k, _)| k != key);
        attributes.push((key.clone(), value.clone()));
    }
    Ok(attributes)
}

fn destination(code: &CodeSettings, signal: Signal) -> Result<Destination, InitError> {
    let vars = signal.vars();
    let code_exporter = match signal {
        Signal::Traces => code.traces_exporter,
        Signal::Metrics => code.metrics_exporter,
    };
    let choice = layered(code_exporter, "exporter", &[vars.exporter], parse::exporter)?;
    let endpoint = layered(
        code.endpoint.clone(),
        "endpoint",
        &vars.endpoint,
        parse::url,
    )?;
    let exporter = match (choice, &endpoint) {
        (Some((exporter, _)), _) => exporter,
        (None, Some(_)) => Exporter::Otlp,
        (None, None) => Exporter::RunDir,
    };
    match exporter {
        Exporter::Console => return Ok(Destination::Console),
        Exporter::None => return Ok(Destination::None),
        Exporter::RunDir => return Ok(Destination::RunDir),
        Exporter::Otlp => {}
    }
    let protocol = layered(code.protocol, "protocol", &vars.protocol, parse::protocol)?
        .map_or(Protocol::HttpProtobuf, |(p, _)| p);
    let endpoint = match endpoint {
        // A signal's own variable is the full URL, used as is.
        Some((url, Origin::Env(var))) if var == vars.endpoint[0] => url,
        Some((base, _)) => with_signal_path(base, protocol, vars.http_path),
        None => {
            let base = match protocol {
                Protocol::Grpc => "http://localhost:4317",
                Protocol::HttpProtobuf => "http://localhost:4318",
            };
            with_signal_path(base.to_owned(), protocol, vars.http_path)
        }
    };
    // Headers merge by name: the environment's first, then code's over them.
    let mut headers = layered(None, "", &vars.headers, parse::headers)?
        .map(|(h, _)| h)
        .unwrap_or_default();
    for (key, value) in &code.headers {
        parse::check_header(key, value)
            .map_err(|why| invalid(&format!("header({key:?})"), value, why))?;
        headers.retain(|(k, _)| !k.eq_ignore_ascii_case(key));
        headers.push((key.clone(), value.clone()));
    }
    let timeout = layered(code.timeout, "timeout", &vars.timeout, parse::millis)?
        .map_or(Duration::from_secs(10), |(t, _)| t);
    let compression = layered(
        code.compression,
        "compression",
        &vars.compression,
        parse::compression,
    )?
    .map_or(Compression::None, |(c, _)| c);
    Ok(Destination::Otlp(OtlpTarget {
        endpoint,
        protocol,
        headers,
        timeout,
        compression,
    }))
}

/// OTLP/HTTP appends the signal's path to a base endpoint; gRPC takes it as is.
fn with_signal_path(base: String, protocol: Protocol, path: &str) -> String {
    match protocol {
        Protocol::Grpc => base,
        Protocol::HttpProtobuf => format!("{}{path}", base.trim_end_matches('/')),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_env<R>(vars: &[(&str, &str)], f: impl FnOnce() -> R) -> R {
        let mut all: Vec<(&str, Option<&str>)> = vars::ALL.iter().map(|v| (*v, None)).collect();
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
    fn an_overflowing_interval_names_the_variable() {
        let text = error_text(&[("GPUSPAN_SAMPLE_INTERVAL", "99999999999999999999s")]);
        assert!(text.contains("GPUSPAN_SAMPLE_INTERVAL"), "{text}");
        assert!(text.contains("99999999999999999999s"), "{text}");
    }

    #[test]
    fn compression_is_resolved_per_signal_and_code_wins() {
        let env = [
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://env:4318"),
            ("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip"),
            ("OTEL_EXPORTER_OTLP_METRICS_COMPRESSION", "none"),
        ];
        let settings = with_env(&env, || resolve(&CodeSettings::default())).unwrap();
        assert_eq!(otlp(&settings.traces).compression, Compression::Gzip);
        assert_eq!(otlp(&settings.metrics).compression, Compression::None);
        let code = CodeSettings {
            compression: Some(Compression::None),
            ..CodeSettings::default()
        };
        let settings = with_env(&env, || resolve(&code)).unwrap();
        assert_eq!(otlp(&settings.traces).compression, Compression::None);
        let text = error_text(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://env:4318"),
            ("OTEL_EXPORTER_OTLP_COMPRESSION", "zstd"),
        ]);
        assert!(text.contains("OTEL_EXPORTER_OTLP_COMPRESSION") && text.contains("gzip or none"));
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

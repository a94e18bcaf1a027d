//! Settings, resolved once: code, then the signal's own variable, then the variable for
//! every signal, then the default.
//!
//! Every environment variable is read here and nowhere else (names in [`vars`], each
//! setting's in the table of [`table`]), and a value that does not parse is an error that
//! names the variable, the value and what would be accepted. What is resolved here is
//! final: exporters are built so that nothing reads the environment again.

mod destination;
pub(crate) mod error;
pub(crate) mod job;
mod kinds;
pub(crate) mod layered;
pub(crate) mod parse;
mod sampling;
pub(crate) mod table;
pub(crate) mod torch;
pub(crate) mod vars;

use std::ffi::OsString;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::error::InitError;
use crate::source::drm::{DrmScope, Roots};
use crate::source::DeviceScope;
pub use destination::{Destination, OtlpTarget};
pub use error::InvalidValue;
pub use kinds::{Compression, Exporter, Protocol};
use layered::{first_var, layered, resolved, Env};
pub(crate) use sampling::Sampling;
pub(crate) use table::Signal;
pub(crate) use table::ROWS;
pub use table::{Setting, Vars};

/// Default sampling interval: 5 ms. A spike of 10 ms (two intervals) is always seen, a
/// 200 ms step gets about 40 readings, and the sampler stays under 1% of a core (0.6% with 8
/// devices in BENCHMARKS.md, on the fake NVML; a real driver's read costs more).
pub const DEFAULT_SAMPLE_INTERVAL: Duration = Duration::from_millis(5);

/// Values set in code through the builder; `None` falls back to the environment.
#[derive(Debug, Clone, Default)]
pub struct CodeSettings {
    pub(crate) disabled: Option<bool>,
    pub(crate) service_name: Option<String>,
    pub(crate) resource: Vec<(String, String)>,
    /// Time between two readings of every device.
    pub sample_interval: Option<Duration>,
    /// Where NVML is loaded from.
    pub nvml_lib: Option<PathBuf>,
    pub(crate) devices: Option<String>,
    pub(crate) sysfs_root: Option<PathBuf>,
    pub(crate) procfs_root: Option<PathBuf>,
    /// The root of the run directories.
    pub run_dir: Option<PathBuf>,
    pub(crate) run_id: Option<String>,
    pub(crate) job_id: Option<String>,
    /// The OTLP endpoint, for both signals.
    pub endpoint: Option<String>,
    /// The OTLP protocol, for both signals.
    pub protocol: Option<Protocol>,
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
    /// Measure every device of the node even in a rank's environment (the collector).
    pub whole_node: bool,
}

/// Launcher-provided position of this process in a distributed run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Rank {
    pub(crate) rank: Option<i64>,
    pub(crate) local_rank: Option<i64>,
    pub(crate) world_size: Option<i64>,
    /// The id every rank of one job shares.
    pub(crate) job_id: Option<String>,
}

/// Every setting, resolved.
#[derive(Debug, Clone)]
pub struct Settings {
    pub(crate) disabled: bool,
    pub(crate) service_name: String,
    pub(crate) resource: Vec<(String, String)>,
    /// Time between two readings of every device.
    pub sample_interval: Duration,
    /// Where NVML is loaded from (`None`: the system's).
    #[cfg_attr(not(feature = "nvml"), allow(dead_code))]
    /// Where NVML is loaded from (`None`: the system's).
    pub nvml_lib: Option<PathBuf>,
    /// The devices in scope.
    pub devices: DeviceScope,
    /// The AMD and Intel devices in scope.
    pub(crate) drm_devices: DrmScope,
    /// Where the kernel's files are read for AMD and Intel GPUs.
    pub(crate) roots: Roots,
    /// Where `nvidia-smi` is looked for (`PATH`).
    pub(crate) search_path: Option<OsString>,
    /// The root of the run directories (`gpuspan-runs`).
    pub run_root: PathBuf,
    /// The run id, the name of the run's directory.
    pub run_id: String,
    /// The run id is this process's own (date, time and pid): no other rank shares its
    /// directory.
    pub(crate) run_id_is_own: bool,
    pub(crate) rank: Rank,
    /// Where spans go.
    pub traces: Destination,
    /// Where metric points go.
    pub metrics: Destination,
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

/// A rank's run directory is `<run-id>/rank-<rank>` when a job has several ranks.
pub const RANK_DIR_PREFIX: &str = "rank-";

impl Settings {
    /// These settings for a collector's own telemetry: its gauges under `service_name`, no
    /// spans of its own (the spans it receives are forwarded, not its own), no summary, and
    /// no flush on a signal. Give them to [`Builder::build_resolved`](crate::Builder::build_resolved).
    #[must_use]
    pub fn for_collectors_own(&self, service_name: String) -> Settings {
        Settings {
            service_name,
            traces: Destination::None,
            summary: false,
            flush_on_signal: false,
            ..self.clone()
        }
    }

    /// The run directory: `<root>/<run-id>`, with one sub-directory per rank when the
    /// launcher says there are several.
    pub fn run_dir(&self) -> PathBuf {
        let dir = self.run_root.join(&self.run_id);
        match (self.rank.rank, self.rank.world_size) {
            (Some(rank), Some(world)) if world > 1 => dir.join(format!("{RANK_DIR_PREFIX}{rank}")),
            _ => dir,
        }
    }
}

/// Where `gpuspan report` looks for runs: `GPUSPAN_RUN_DIR`, else `gpuspan-runs`.
pub fn default_run_root() -> PathBuf {
    run_root(None, Env::process()).unwrap_or_else(|_| (table::RUN_DIR.value)())
}

fn run_root(code: Option<PathBuf>, env: Env<'_>) -> Result<PathBuf, InitError> {
    Ok(resolved(&table::RUN_DIR, code, env)?)
}

/// `OTEL_SERVICE_NAME`, for a command `gpuspan run` starts: the name it gets unless set.
#[cfg_attr(not(feature = "pipeline"), allow(dead_code))]
pub fn service_name_variable() -> Option<String> {
    layered(&table::SERVICE_NAME, None, None, Env::process())
        .ok()
        .flatten()
        .map(|(name, _)| name)
}

/// Resolves every setting from code, then environment, then defaults.
pub fn resolve(code: &CodeSettings) -> Result<Settings, InitError> {
    resolve_in(code, Env::process())
}

/// As [`resolve`], with the variables read from `env`.
fn resolve_in(code: &CodeSettings, env: Env<'_>) -> Result<Settings, InitError> {
    use vars::*;
    let disabled = resolved(&table::DISABLED, code.disabled, env)?;
    let resource = resource_attributes(code, env)?;
    let service_name = layered(&table::SERVICE_NAME, code.service_name.clone(), None, env)?
        .map(|(name, _)| name)
        .or_else(|| {
            resource
                .iter()
                .find(|(k, _)| k == crate::names::attribute::SERVICE_NAME)
                .map(|(_, v)| v.clone())
        })
        .unwrap_or_else(default_service_name);
    let sample_interval = resolved(&table::SAMPLE_INTERVAL, code.sample_interval, env)?;
    let mut rank = rank(env)?;
    let job = job::job(code.job_id.as_deref(), env);
    rank.job_id = job.as_ref().map(|job| job.id.clone());
    let devices = device_scope(code, rank.local_rank, env)?;
    let drm_devices = drm_scope(code, rank.local_rank, env)?;
    let roots = Roots {
        sysfs: resolved(&table::SYSFS_ROOT, code.sysfs_root.clone(), env)?,
        procfs: resolved(&table::PROCFS_ROOT, code.procfs_root.clone(), env)?,
    };
    let (run_id, run_id_is_own) = run_id(code, job.as_ref(), env)?;
    let metric_interval = resolved(&table::METRIC_EXPORT_INTERVAL, code.metric_interval, env)?;
    let prometheus_addr =
        layered(&table::PROMETHEUS_ADDR, code.prometheus_addr, None, env)?.map(|(addr, _)| addr);
    let export_queue = resolved(&table::EXPORT_QUEUE, code.export_queue, env)?.max(1);
    let log_filter = first_var(&[RUST_LOG], log_filter, env)?.map(|(filter, _)| filter);
    Ok(Settings {
        disabled,
        service_name,
        resource,
        sample_interval,
        nvml_lib: layered(&table::NVML_LIB, code.nvml_lib.clone(), None, env)?.map(|(p, _)| p),
        devices,
        drm_devices,
        roots,
        search_path: std::env::var_os(PATH),
        run_root: run_root(code.run_dir.clone(), env)?,
        run_id_is_own,
        run_id,
        rank,
        traces: destination::destination(code, Signal::Traces, env)?,
        metrics: destination::destination(code, Signal::Metrics, env)?,
        metric_interval,
        prometheus_addr,
        export_queue,
        log_filter,
        summary: resolved(&table::SUMMARY, code.summary, env)?,
        flush_on_signal: resolved(&table::FLUSH_ON_SIGNAL, code.flush_on_signal, env)?,
        sampling: sampling::sampling(env),
    })
}

/// `RUST_LOG`, checked as the event layer will read it.
fn log_filter(filter: &str) -> Result<String, InvalidValue> {
    match tracing_subscriber::EnvFilter::try_new(filter) {
        Ok(_) => Ok(filter.to_owned()),
        Err(e) => Err(InvalidValue::new(
            filter,
            format!("a tracing filter such as info or mycrate=debug ({e})"),
        )),
    }
}

fn default_service_name() -> String {
    std::env::current_exe()
        .ok()
        .and_then(|exe| exe.file_stem().map(|s| s.to_string_lossy().into_owned()))
        .map(|name| format!("unknown_service:{name}"))
        .unwrap_or_else(|| "unknown_service".to_owned())
}

/// Code, `GPUSPAN_RUN_ID`, then the directory of the job (see [`job`]), else date, time
/// and pid; and whether it is that last, this process's own.
fn run_id(
    code: &CodeSettings,
    job: Option<&job::Job>,
    env: Env<'_>,
) -> Result<(String, bool), InitError> {
    if let Some((id, _)) = layered(&table::RUN_ID, code.run_id.clone(), None, env)? {
        return Ok((id, false));
    }
    Ok(match job {
        Some(job) => (job.dir.clone(), false),
        None => (generated_run_id(), true),
    })
}

fn generated_run_id() -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let (date, time) = crate::util::time::utc_date_time(now.as_secs());
    format!("{date}-{time}-{}", std::process::id())
}

fn rank(env: Env<'_>) -> Result<Rank, InitError> {
    use vars::*;
    let first = |vars: &[&'static str]| -> Result<Option<i64>, InitError> {
        Ok(first_var(vars, parse::integer, env)?.map(|(v, _)| v))
    };
    // torchrun's, SLURM's, Open MPI's, MPICH's (Hydra), then PMIx's names.
    Ok(Rank {
        rank: first(&[
            RANK,
            SLURM_PROCID,
            OMPI_COMM_WORLD_RANK,
            PMI_RANK,
            PMIX_RANK,
        ])?,
        local_rank: first(&[
            LOCAL_RANK,
            SLURM_LOCALID,
            OMPI_COMM_WORLD_LOCAL_RANK,
            MPI_LOCALRANKID,
        ])?,
        world_size: first(&[WORLD_SIZE, SLURM_NTASKS, OMPI_COMM_WORLD_SIZE, PMI_SIZE])?,
        job_id: None,
    })
}

/// The rank the launcher gave this process (torchrun's, SLURM's, Open MPI's, MPICH's or
/// PMIx's variable), as every part of gpuspan reads it; `None` outside a launcher.
///
/// # Errors
/// A rank variable that is not a whole number, named with its value.
pub fn launcher_rank() -> Result<Option<i64>, InitError> {
    Ok(rank(Env::process())?.rank)
}

/// Whether `GPUSPAN_DEVICES` chooses the devices (set, and not blank: a blank variable is
/// unset, as for every setting); a rank then measures those, not its own device.
pub fn devices_chosen() -> bool {
    Env::process().get(vars::GPUSPAN_DEVICES).is_some()
}

/// The device CUDA numbers `ordinal`, as a `GPUSPAN_DEVICES` entry: its entry of
/// `CUDA_VISIBLE_DEVICES` as gpuspan reads that list (commas, blanks, an entry of `-1`
/// ending it), else the number itself.
///
/// # Errors
/// A `CUDA_VISIBLE_DEVICES` entry that names no device, as resolving the scope says it.
pub fn cuda_device(ordinal: usize) -> Result<String, InitError> {
    let visible = match Env::process().raw(vars::CUDA_VISIBLE_DEVICES) {
        Some(list) => Some(
            table::DEVICES
                .read(&list)
                .map_err(|error| error.named(vars::CUDA_VISIBLE_DEVICES, &list))?,
        ),
        None => None,
    };
    Ok(visible
        .and_then(|scope| scope.entry(ordinal))
        .unwrap_or_else(|| ordinal.to_string()))
}

/// Code, `GPUSPAN_DEVICES`, then `CUDA_VISIBLE_DEVICES`, else every device; without the
/// first two, a rank (`local_rank`) measures only its own device of those.
fn device_scope(
    code: &CodeSettings,
    local_rank: Option<i64>,
    env: Env<'_>,
) -> Result<DeviceScope, InitError> {
    let chosen = match &code.devices {
        Some(list) => Some(table::DEVICES.read_code(list)?),
        None => None,
    };
    if let Some((scope, _)) = layered(&table::DEVICES, chosen, None, env)? {
        return Ok(scope);
    }
    // Unlike the others, an empty CUDA_VISIBLE_DEVICES means "no device".
    let visible = match env.raw(vars::CUDA_VISIBLE_DEVICES) {
        Some(list) => table::DEVICES
            .read(&list)
            .map_err(|error| error.named(vars::CUDA_VISIBLE_DEVICES, &list))?,
        None => DeviceScope::all(),
    };
    Ok(match local_rank.and_then(|r| usize::try_from(r).ok()) {
        Some(position) if !code.whole_node => visible.at_position(position),
        _ => visible,
    })
}

/// The AMD and Intel devices: code or `GPUSPAN_DEVICES` (by gpuspan's numbering), else
/// the runtimes' own lists (`ROCR_VISIBLE_DEVICES`, then `HIP_VISIBLE_DEVICES` or else
/// `CUDA_VISIBLE_DEVICES`, which HIP honours; `ZE_AFFINITY_MASK`); a rank then keeps its
/// own device of those, as on NVIDIA.
fn drm_scope(
    code: &CodeSettings,
    local_rank: Option<i64>,
    env: Env<'_>,
) -> Result<DrmScope, InitError> {
    use crate::source::drm::scope::Visible;
    let chosen = match &code.devices {
        Some(list) => Some(table::DEVICES.read_code(list)?),
        None => None,
    };
    if let Some((scope, _)) = layered(&table::DEVICES, chosen, None, env)? {
        return Ok(DrmScope {
            chosen: Some(scope),
            ..DrmScope::default()
        });
    }
    let list = |var: &'static str,
                parse: fn(&str) -> Result<Visible, crate::source::DeviceScopeError>|
     -> Result<Option<Visible>, InitError> {
        let Some(text) = env.raw(var) else {
            return Ok(None);
        };
        parse(&text).map(Some).map_err(|error| {
            InitError::from(error::SettingError::new(
                var,
                &text,
                format!("device positions or GPU-... UUIDs separated by commas ({error})"),
            ))
        })
    };
    let mut amd = Vec::new();
    amd.extend(list(vars::ROCR_VISIBLE_DEVICES, Visible::parse)?);
    match list(vars::HIP_VISIBLE_DEVICES, Visible::parse)? {
        Some(hip) => amd.push(hip),
        None => amd.extend(list(vars::CUDA_VISIBLE_DEVICES, Visible::parse)?),
    }
    let intel = list(vars::ZE_AFFINITY_MASK, Visible::parse_ze)?;
    let position = match local_rank.and_then(|r| usize::try_from(r).ok()) {
        Some(position) if !code.whole_node => Some(position),
        _ => None,
    };
    Ok(DrmScope {
        chosen: None,
        amd,
        intel,
        position,
    })
}

/// `OTEL_RESOURCE_ATTRIBUTES` (`key=value,key=value`, values percent-encoded), then code.
fn resource_attributes(
    code: &CodeSettings,
    env: Env<'_>,
) -> Result<Vec<(String, String)>, InitError> {
    let mut attributes = layered(&table::RESOURCE_ATTRIBUTES, None, None, env)?
        .map(|(v, _)| v)
        .unwrap_or_default();
    for (key, value) in &code.resource {
        attributes.retain(|(k, _)| k != key);
        attributes.push((key.clone(), value.clone()));
    }
    Ok(attributes)
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
    fn every_exporter_the_environment_names_is_where_both_signals_go() {
        for exporter in Exporter::ALL {
            let env = [
                ("OTEL_TRACES_EXPORTER", exporter.as_str()),
                ("OTEL_METRICS_EXPORTER", exporter.as_str()),
            ];
            let settings = with_env(&env, || resolve(&CodeSettings::default())).unwrap();
            for destination in [&settings.traces, &settings.metrics] {
                let reached = match destination {
                    Destination::Otlp(_) => Exporter::Otlp,
                    Destination::Console => Exporter::Console,
                    Destination::None => Exporter::None,
                    Destination::RunDir => Exporter::RunDir,
                };
                assert_eq!(reached, exporter, "{destination:?}");
            }
        }
    }

    #[test]
    fn the_environment_can_send_one_signal_to_the_run_directory() {
        let env = [
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://env:4318"),
            ("OTEL_METRICS_EXPORTER", "run_dir"),
        ];
        let settings = with_env(&env, || resolve(&CodeSettings::default())).unwrap();
        assert_eq!(otlp(&settings.traces).endpoint, "http://env:4318/v1/traces");
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
                world_size: Some(8),
                job_id: Some("job42".into()),
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
        assert_eq!(settings.rank.job_id.as_deref(), Some("777"));
        // torchrun without a rendezvous id says `none`; gpuspan run's id comes next.
        let placeholder = [("TORCHELASTIC_RUN_ID", "none"), ("GPUSPAN_JOB_ID", "run-1")];
        let settings = with_env(&placeholder, || resolve(&CodeSettings::default())).unwrap();
        assert_eq!(settings.rank.job_id.as_deref(), Some("run-1"));
    }

    #[test]
    fn mpirun_s_variables_give_the_rank_too() {
        let open_mpi = [
            ("OMPI_COMM_WORLD_RANK", "6"),
            ("OMPI_COMM_WORLD_LOCAL_RANK", "2"),
            ("OMPI_COMM_WORLD_SIZE", "8"),
        ];
        let settings = with_env(&open_mpi, || resolve(&CodeSettings::default())).unwrap();
        let rank = &settings.rank;
        assert_eq!(
            (rank.rank, rank.local_rank, rank.world_size),
            (Some(6), Some(2), Some(8))
        );
        let mpich = [
            ("PMI_RANK", "1"),
            ("MPI_LOCALRANKID", "1"),
            ("PMI_SIZE", "2"),
        ];
        let settings = with_env(&mpich, || resolve(&CodeSettings::default())).unwrap();
        let rank = &settings.rank;
        assert_eq!(
            (rank.rank, rank.local_rank, rank.world_size),
            (Some(1), Some(1), Some(2))
        );
    }

    /// The run directory and job id of a rank started with `env`.
    fn job_of(env: &[(&str, &str)], code: CodeSettings) -> (PathBuf, Option<String>) {
        let settings = with_env(env, || resolve(&code)).unwrap();
        (settings.run_dir(), settings.rank.job_id)
    }

    #[test]
    fn every_rank_of_an_mpi_job_gets_the_job_s_directory_from_its_launcher() {
        // Open MPI 4's mpirun: its job id, and the key it draws for each job (the job id
        // alone is a hash of host and pid, which a later job may draw again).
        let open_mpi = [
            ("OMPI_COMM_WORLD_RANK", "1"),
            ("OMPI_COMM_WORLD_LOCAL_RANK", "1"),
            ("OMPI_COMM_WORLD_SIZE", "2"),
            ("OMPI_MCA_ess_base_jobid", "1150091265"),
            (
                "OMPI_MCA_orte_precondition_transports",
                "403dbbd1686a868a-4de8afb20a99d069",
            ),
            ("PMIX_NAMESPACE", "1150091265"),
            ("PMIX_RANK", "1"),
        ];
        assert_eq!(
            job_of(&open_mpi, CodeSettings::default()),
            (
                PathBuf::from("gpuspan-runs/ompi-1150091265-403dbbd1686a868a/rank-1"),
                Some("1150091265".into())
            )
        );
        // A PMIx launcher (Open MPI 5's prterun, SLURM's srun --mpi=pmix): its namespace,
        // made one directory name.
        let pmix = [
            ("PMIX_RANK", "3"),
            ("OMPI_COMM_WORLD_SIZE", "4"),
            ("PMIX_NAMESPACE", "prterun-node/a-4242@1"),
        ];
        let settings = with_env(&pmix, || resolve(&CodeSettings::default())).unwrap();
        assert_eq!(settings.rank.rank, Some(3), "PMIX_RANK gives the rank");
        assert_eq!(
            settings.run_dir(),
            PathBuf::from("gpuspan-runs/pmix-prterun-node-a-4242@1/rank-3")
        );
        assert_eq!(
            settings.rank.job_id.as_deref(),
            Some("prterun-node/a-4242@1")
        );
        // A PMI-1 launcher that names its key-value space.
        let pmi = [
            ("PMI_RANK", "0"),
            ("PMI_SIZE", "2"),
            ("PMI_KVSNAME", "kvs_4242_0"),
        ];
        assert_eq!(
            job_of(&pmi, CodeSettings::default()).0,
            PathBuf::from("gpuspan-runs/pmi-kvs_4242_0/rank-0")
        );
        // Two steps of one SLURM allocation are two jobs.
        let srun = [
            ("SLURM_PROCID", "1"),
            ("SLURM_NTASKS", "2"),
            ("SLURM_JOB_ID", "777"),
            ("SLURM_STEP_ID", "2"),
        ];
        assert_eq!(
            job_of(&srun, CodeSettings::default()),
            (
                PathBuf::from("gpuspan-runs/slurm-777.2/rank-1"),
                Some("777.2".into())
            )
        );
    }

    #[test]
    fn gpuspan_run_s_job_id_names_the_directory_when_no_launcher_does() {
        // MPICH's Hydra gives its ranks no job id; `gpuspan run -- mpiexec ...` does.
        let hydra = [
            ("PMI_RANK", "1"),
            ("MPI_LOCALRANKID", "1"),
            ("PMI_SIZE", "2"),
            ("GPUSPAN_JOB_ID", "20250102-030405-42"),
        ];
        assert_eq!(
            job_of(&hydra, CodeSettings::default()),
            (
                PathBuf::from("gpuspan-runs/20250102-030405-42/rank-1"),
                Some("20250102-030405-42".into())
            )
        );
        // The launcher's id still comes first: one `gpuspan run` per node of one job.
        let mut under_mpirun = hydra.to_vec();
        under_mpirun.push(("OMPI_MCA_ess_base_jobid", "99"));
        assert_eq!(
            job_of(&under_mpirun, CodeSettings::default()),
            (
                PathBuf::from("gpuspan-runs/ompi-99/rank-1"),
                Some("99".into())
            )
        );
        // The job id set in code names the directory too; the run id set anywhere wins.
        let code = CodeSettings {
            job_id: Some("sweep-7".into()),
            ..CodeSettings::default()
        };
        assert_eq!(
            job_of(&hydra, code).0,
            PathBuf::from("gpuspan-runs/sweep-7/rank-1")
        );
        let mut named = hydra.to_vec();
        named.push(("GPUSPAN_RUN_ID", "mine"));
        assert_eq!(
            job_of(&named, CodeSettings::default()).0,
            PathBuf::from("gpuspan-runs/mine/rank-1")
        );
    }

    #[test]
    fn none_and_blank_ids_are_no_ids_for_the_job_and_the_directory_alike() {
        // torchrun's placeholder where a rendezvous has no id (a static rendezvous).
        let torchrun = [
            ("RANK", "1"),
            ("LOCAL_RANK", "1"),
            ("WORLD_SIZE", "2"),
            ("TORCHELASTIC_RUN_ID", "none"),
            ("SLURM_JOB_ID", " "),
            ("GPUSPAN_JOB_ID", ""),
        ];
        let settings = with_env(&torchrun, || resolve(&CodeSettings::default())).unwrap();
        assert_eq!(settings.rank.job_id, None);
        assert_ne!(settings.run_id, "none");
        assert!(settings.run_id_is_own, "{}", settings.run_id);
        assert!(
            settings
                .run_id
                .ends_with(&format!("-{}", std::process::id())),
            "a directory of this process's own: {}",
            settings.run_id
        );
        let mut with_id = torchrun.to_vec();
        with_id.push(("PMIX_NAMESPACE", "none"));
        with_id.push(("OMPI_MCA_ess_base_jobid", ""));
        with_id.retain(|(k, _)| *k != "GPUSPAN_JOB_ID");
        with_id.push(("GPUSPAN_JOB_ID", "run-1"));
        let settings = with_env(&with_id, || resolve(&CodeSettings::default())).unwrap();
        assert_eq!(settings.rank.job_id.as_deref(), Some("run-1"));
        assert_eq!(
            settings.run_dir(),
            PathBuf::from("gpuspan-runs/run-1/rank-1")
        );
        assert!(!settings.run_id_is_own);
    }

    #[test]
    fn a_rank_measures_its_own_device_unless_a_scope_is_given() {
        let of = |env: &[(&str, &str)], code: CodeSettings| {
            with_env(env, || resolve(&code)).unwrap().devices
        };
        let rank = [("LOCAL_RANK", "1"), ("CUDA_VISIBLE_DEVICES", "4,6")];
        assert_eq!(
            of(&rank, CodeSettings::default()),
            DeviceScope::parse("6").unwrap()
        );
        let chosen = [("LOCAL_RANK", "1"), ("GPUSPAN_DEVICES", "4,6")];
        assert_eq!(
            of(&chosen, CodeSettings::default()),
            DeviceScope::parse("4,6").unwrap()
        );
        let collector = CodeSettings {
            whole_node: true,
            ..CodeSettings::default()
        };
        assert_eq!(of(&rank, collector), DeviceScope::parse("4,6").unwrap());
    }

    #[test]
    fn amd_and_intel_devices_follow_their_runtimes_lists_and_the_rank() {
        use crate::source::drm::scope::Visible;
        let of = |env: &[(&str, &str)]| {
            with_env(env, || resolve(&CodeSettings::default()))
                .unwrap()
                .drm_devices
        };
        let scope = of(&[
            ("ROCR_VISIBLE_DEVICES", "1,2,3"),
            ("HIP_VISIBLE_DEVICES", "0,2"),
            ("CUDA_VISIBLE_DEVICES", "1"),
            ("ZE_AFFINITY_MASK", "0.1"),
            ("LOCAL_RANK", "1"),
        ]);
        assert_eq!(
            scope.amd,
            vec![
                Visible::parse("1,2,3").unwrap(),
                Visible::parse("0,2").unwrap()
            ]
        );
        assert_eq!(scope.intel, Some(Visible::parse_ze("0").unwrap()));
        assert_eq!(scope.position, Some(1));
        // HIP honours CUDA_VISIBLE_DEVICES when HIP_VISIBLE_DEVICES is unset.
        let cuda = of(&[("CUDA_VISIBLE_DEVICES", "1")]);
        assert_eq!(cuda.amd, vec![Visible::parse("1").unwrap()]);
        let chosen = of(&[("GPUSPAN_DEVICES", "2"), ("ROCR_VISIBLE_DEVICES", "0")]);
        assert_eq!(chosen.chosen, Some(DeviceScope::parse("2").unwrap()));
        assert!(chosen.amd.is_empty());
        let err = with_env(&[("ZE_AFFINITY_MASK", "gpu0")], || {
            resolve(&CodeSettings::default())
        })
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("ZE_AFFINITY_MASK") && err.contains("gpu0"),
            "{err}"
        );
    }

    #[test]
    fn the_kernel_s_file_roots_default_to_sys_and_proc() {
        let settings = with_env(&[], || resolve(&CodeSettings::default())).unwrap();
        assert_eq!(settings.roots.sysfs, PathBuf::from("/sys"));
        assert_eq!(settings.roots.procfs, PathBuf::from("/proc"));
        let env = [
            ("GPUSPAN_SYSFS_ROOT", "/tmp/sys"),
            ("GPUSPAN_PROCFS_ROOT", "/tmp/proc"),
        ];
        let settings = with_env(&env, || resolve(&CodeSettings::default())).unwrap();
        assert_eq!(settings.roots.sysfs, PathBuf::from("/tmp/sys"));
        assert_eq!(settings.roots.procfs, PathBuf::from("/tmp/proc"));
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

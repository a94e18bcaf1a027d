//! The builder: settings in code (they beat the environment), then `install()` or
//! `build()`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::Layer;

use super::{Inner, Telemetry};
use crate::config::{self, CodeSettings, Compression, Exporter, Protocol};
use crate::error::InitError;
use crate::source::MemorySource;

/// Configures gpuspan in code; a value set here beats the environment variable.
#[derive(Default)]
#[must_use = "a builder does nothing until `install()` or `build()`"]
pub struct Builder {
    code: CodeSettings,
    source: Option<Box<dyn MemorySource>>,
    /// Observers of the sampler's ticks (`collect`'s timeline).
    observers: Vec<Box<dyn crate::timeline::TickObserver>>,
    /// Diagnosis settings, set by the methods in `diagnose_setters.rs`.
    pub(crate) diagnose: crate::diagnose::settings::DiagnoseCode,
    /// Timeline file and TensorBoard switches (resolved in `runlog::setup`).
    pictures: crate::runlog::setup::PictureCode,
}

impl std::fmt::Debug for Builder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Builder")
            .field("settings", &self.code)
            .field("source", &self.source)
            .finish()
    }
}

impl Builder {
    /// Hands every sampler tick to `observer` as well: for collectors that keep a timeline of
    /// their own (`pipeline::TickObserver`, feature `pipeline`).
    #[cfg_attr(not(feature = "pipeline"), allow(dead_code))]
    pub fn tick_observer(mut self, observer: Box<dyn crate::timeline::TickObserver>) -> Self {
        self.observers.push(observer);
        self
    }

    /// `service.name` (else `OTEL_SERVICE_NAME`, else `unknown_service:<executable>`).
    pub fn service_name(mut self, name: impl Into<String>) -> Self {
        self.code.service_name = Some(name.into());
        self
    }

    /// Adds a resource attribute (beats `OTEL_RESOURCE_ATTRIBUTES`).
    pub fn resource_attribute(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.code.resource.push((key.into(), value.into()));
        self
    }

    /// How often the sampler reads memory (else `GPUSPAN_SAMPLE_INTERVAL`, else
    /// [`DEFAULT_SAMPLE_INTERVAL`](crate::settings::DEFAULT_SAMPLE_INTERVAL)).
    /// A spike that lasts two intervals is always in the peak.
    pub fn sample_interval(mut self, interval: Duration) -> Self {
        self.code.sample_interval = Some(interval);
        self
    }

    /// How often the sampler reads energy, power and clock event reasons (else
    /// `GPUSPAN_POWER_INTERVAL`, else
    /// [`DEFAULT_POWER_INTERVAL`](crate::settings::DEFAULT_POWER_INTERVAL)), on its own
    /// thread between memory readings. A span shorter than a device's energy counter period
    /// takes its energy from these power readings.
    pub fn power_interval(mut self, interval: Duration) -> Self {
        self.code.power_interval = Some(interval);
        self
    }

    /// Path of `libnvidia-ml.so` (else `GPUSPAN_NVML_LIB`, else the system's).
    pub fn nvml_lib(mut self, path: impl Into<PathBuf>) -> Self {
        self.code.nvml_lib = Some(path.into());
        self
    }

    /// Devices to measure, as NVML indexes or `GPU-...` UUIDs separated by commas (else
    /// `GPUSPAN_DEVICES`, else `CUDA_VISIBLE_DEVICES`, else all).
    pub fn devices(mut self, list: impl Into<String>) -> Self {
        self.code.devices = Some(list.into());
        self
    }

    /// Where sysfs is, for AMD and Intel GPUs' files (else `GPUSPAN_SYSFS_ROOT`, else
    /// `/sys`): a tree laid out as `/sys`, for tests or a container that mounts it elsewhere.
    pub fn sysfs_root(mut self, path: impl Into<PathBuf>) -> Self {
        self.code.sysfs_root = Some(path.into());
        self
    }

    /// Where procfs is, for this process's DRM clients (else `GPUSPAN_PROCFS_ROOT`, else
    /// `/proc`); this process's files are `<root>/<its pid>/fdinfo`.
    pub fn procfs_root(mut self, path: impl Into<PathBuf>) -> Self {
        self.code.procfs_root = Some(path.into());
        self
    }

    /// Reads GPU memory from `source` instead of NVML.
    pub fn memory_source(mut self, source: impl MemorySource) -> Self {
        self.source = Some(Box::new(source));
        self
    }

    /// Parent of run directories (else `GPUSPAN_RUN_DIR`, else `gpuspan-runs`).
    pub fn run_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.code.run_dir = Some(dir.into());
        self
    }

    /// `ml.run.id` and the run directory's name (else `GPUSPAN_RUN_ID`, else the job's
    /// directory, named after [`job_id`](Self::job_id) or the launcher's job, else date,
    /// time and pid).
    pub fn run_id(mut self, id: impl Into<String>) -> Self {
        self.code.run_id = Some(id.into());
        self
    }

    /// `ml.job.id`, which every rank of one job shares, and the job's directory (else the
    /// launcher's: torchrun's, Open MPI's, a PMIx or PMI launcher's, SLURM's; else
    /// `GPUSPAN_JOB_ID`, which `gpuspan run` sets to its run id).
    pub fn job_id(mut self, id: impl Into<String>) -> Self {
        self.code.job_id = Some(id.into());
        self
    }

    /// OTLP endpoint for every signal (else `OTEL_EXPORTER_OTLP_ENDPOINT`). Setting one
    /// sends traces and metrics over OTLP instead of to the run directory.
    pub fn endpoint(mut self, url: impl Into<String>) -> Self {
        self.code.endpoint = Some(url.into());
        self
    }

    /// OTLP transport (else `OTEL_EXPORTER_OTLP_PROTOCOL`, else `http/protobuf`).
    pub fn protocol(mut self, protocol: Protocol) -> Self {
        self.code.protocol = Some(protocol);
        self
    }

    /// Adds an OTLP request header (beats `OTEL_EXPORTER_OTLP_HEADERS`).
    pub fn header(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.code.headers.push((key.into(), value.into()));
        self
    }

    /// Export timeout (else `OTEL_EXPORTER_OTLP_TIMEOUT`, else 10 s). Shutdown waits at
    /// most this long for what is still undelivered.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.code.timeout = Some(timeout);
        self
    }

    /// OTLP request compression (else `OTEL_EXPORTER_OTLP_COMPRESSION`, else none).
    pub fn compression(mut self, compression: Compression) -> Self {
        self.code.compression = Some(compression);
        self
    }

    /// The PEM file of the CA that signed the OTLP endpoint's certificate, trusted instead
    /// of the system's roots (else `OTEL_EXPORTER_OTLP_CERTIFICATE`, else the system's roots
    /// and the bundled web roots). Read and checked by `install`.
    pub fn certificate(mut self, path: impl Into<PathBuf>) -> Self {
        self.code.certificate = Some(path.into());
        self
    }

    /// The PEM file of this client's certificate, for an endpoint that asks for mutual
    /// TLS (else `OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE`); set with [`client_key`](Self::client_key).
    pub fn client_certificate(mut self, path: impl Into<PathBuf>) -> Self {
        self.code.client_certificate = Some(path.into());
        self
    }

    /// The PEM file of this client's private key (else `OTEL_EXPORTER_OTLP_CLIENT_KEY`);
    /// set with [`client_certificate`](Self::client_certificate).
    pub fn client_key(mut self, path: impl Into<PathBuf>) -> Self {
        self.code.client_key = Some(path.into());
        self
    }

    /// Plain text to a gRPC endpoint given as `host:port`, without a scheme (else
    /// `OTEL_EXPORTER_OTLP_INSECURE`, else `false`: TLS). An `http://` or `https://`
    /// endpoint says it by itself.
    pub fn insecure(mut self, insecure: bool) -> Self {
        self.code.insecure = Some(insecure);
        self
    }

    /// How many completed spans may wait while the destination is unreachable (else
    /// `GPUSPAN_EXPORT_QUEUE`, else 65,536). An outage shorter than that loses nothing;
    /// past it the oldest spans are given up and counted.
    pub fn export_queue(mut self, spans: usize) -> Self {
        self.code.export_queue = Some(spans);
        self
    }

    /// Where spans go (else `OTEL_TRACES_EXPORTER`).
    pub fn traces_exporter(mut self, exporter: Exporter) -> Self {
        self.code.traces_exporter = Some(exporter);
        self
    }

    /// Where metrics go (else `OTEL_METRICS_EXPORTER`).
    pub fn metrics_exporter(mut self, exporter: Exporter) -> Self {
        self.code.metrics_exporter = Some(exporter);
        self
    }

    /// How often metrics are exported (else `OTEL_METRIC_EXPORT_INTERVAL`, else 60 s).
    pub fn metric_export_interval(mut self, interval: Duration) -> Self {
        self.code.metric_interval = Some(interval);
        self
    }

    /// Serves a Prometheus scrape endpoint (else `GPUSPAN_PROMETHEUS_ADDR`).
    pub fn prometheus_addr(mut self, addr: SocketAddr) -> Self {
        self.code.prometheus_addr = Some(addr);
        self
    }

    /// Turns everything off (else `OTEL_SDK_DISABLED`): spans cost next to nothing and
    /// nothing is recorded.
    pub fn disabled(mut self, disabled: bool) -> Self {
        self.code.disabled = Some(disabled);
        self
    }

    /// Whether shutdown prints the per-epoch table of a run directory (default: yes).
    pub fn summary(mut self, print: bool) -> Self {
        self.code.summary = Some(print);
        self
    }

    /// Whether `install()` flushes completed spans on SIGINT and SIGTERM (default: yes).
    /// The program's own handlers still run and decide; with none, the signal then ends the
    /// process as usual. The flush takes at most the export timeout.
    pub fn flush_on_signal(mut self, flush: bool) -> Self {
        self.code.flush_on_signal = Some(flush);
        self
    }

    /// Whether the run directory gets `timeline.bin`, every sample that changed a figure
    /// (else `GPUSPAN_TIMELINE`, else on when traces or metrics go to the run directory).
    pub fn timeline(mut self, write: bool) -> Self {
        self.pictures.timeline = Some(write);
        self
    }

    /// Whether the run directory gets TensorBoard event files with each step's and epoch's
    /// memory (else `GPUSPAN_TENSORBOARD`, else off).
    pub fn tensorboard(mut self, write: bool) -> Self {
        self.pictures.tensorboard = Some(write);
        self
    }

    /// Sets everything up and installs a global tracing subscriber: gpuspan's layer plus a
    /// `fmt` layer for events, filtered by `RUST_LOG` (errors only when unset). Also sets
    /// the global OTel tracer and meter providers, and flushes on SIGINT and SIGTERM.
    ///
    /// # Errors
    /// See [`InitError`]; [`InitError::AlreadyInstalled`] if a global subscriber exists
    /// (then use [`Builder::build`] and [`Telemetry::layer`]).
    pub fn install(self) -> Result<Telemetry, InitError> {
        if tracing::dispatcher::has_been_set() {
            return Err(InitError::AlreadyInstalled);
        }
        let telemetry = self.build()?;
        let filter = telemetry
            .log_filter()
            .and_then(|f| tracing_subscriber::EnvFilter::try_new(f).ok())
            .unwrap_or_else(|| tracing_subscriber::EnvFilter::new("error"));
        let events = tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .with_filter(filter);
        let subscriber = tracing_subscriber::registry()
            .with(telemetry.layer())
            .with(events);
        tracing::subscriber::set_global_default(subscriber)
            .map_err(|_| InitError::AlreadyInstalled)?;
        telemetry.install_globals()?;
        Ok(telemetry)
    }

    /// Sets everything up without touching global state; add [`Telemetry::layer`] to your
    /// own subscriber.
    ///
    /// # Errors
    /// See [`InitError`].
    pub fn build(self) -> Result<Telemetry, InitError> {
        let settings = config::resolve(&self.code)?;
        self.build_resolved(settings)
    }

    /// As [`build`](Self::build), with the configuration `settings` resolved already (the
    /// collector's, which measures the whole node): nothing set on this builder's
    /// configuration setters is read, and the environment is not read for it again. For
    /// collectors (`crate::pipeline`, feature `pipeline`), which resolve their settings
    /// with `pipeline::resolve` and measure with them.
    ///
    /// # Errors
    /// See [`InitError`].
    #[cfg_attr(not(feature = "pipeline"), allow(dead_code))]
    pub fn build_resolved(self, settings: config::Settings) -> Result<Telemetry, InitError> {
        let diagnose = super::diagnose_setters::resolve(&self.diagnose)?;
        if settings.disabled {
            return Ok(Telemetry { inner: None });
        }
        let pictures = crate::runlog::setup::from_env(self.pictures, &settings)?;
        Inner::start(settings, self.source, self.observers, diagnose, pictures).map(|inner| {
            Telemetry {
                inner: Some(Box::new(inner)),
            }
        })
    }
}

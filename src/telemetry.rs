//! Setting up: the builder, `init()`, and the guard that flushes and shuts down.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider};
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};
use tracing_subscriber::layer::{Layered, SubscriberExt};
use tracing_subscriber::Layer;

use crate::config::{self, CodeSettings, Destination, Exporter, Protocol, Settings};
use crate::error::{InitError, ShutdownError};
use crate::export::health::ExportHealth;
use crate::export::jsonl::{JsonlMetricExporter, JsonlSpanExporter, Lines};
use crate::export::metrics::CountingMetricExporter;
use crate::export::otlp;
use crate::export::queue::{QueueConfig, QueueProcessor};
use crate::layer::{LayerState, MemoryLayer};
use crate::runlog;
use crate::sampler::{Sampler, SamplerStats};
use crate::source::MemorySource;

/// Sets gpuspan up from the environment and installs it as the global tracing subscriber.
///
/// The same as `Telemetry::builder().install()`: see [`Builder`] for the settings and the
/// environment variables they read.
///
/// # Errors
/// A setting that does not parse, a global subscriber already installed, or a run
/// directory or exporter that cannot be set up. See [`InitError`].
pub fn init() -> Result<Telemetry, InitError> {
    Telemetry::builder().install()
}

/// Configures gpuspan in code; a value set here beats the environment variable.
#[derive(Default)]
#[must_use = "a builder does nothing until `install()` or `build()`"]
pub struct Builder {
    code: CodeSettings,
    source: Option<Box<dyn MemorySource>>,
    // Timeline file and TensorBoard switches (resolved in report::setup).
    pictures: crate::report::setup::PictureCode,
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

    /// How often the sampler reads memory (else `GPUSPAN_SAMPLE_INTERVAL`, else 5 ms).
    /// A spike that lasts two intervals is always in the peak.
    pub fn sample_interval(mut self, interval: Duration) -> Self {
        self.code.sample_interval = Some(interval);
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

    /// `ml.run.id` and the run directory's name (else `GPUSPAN_RUN_ID`, else
    /// `TORCHELASTIC_RUN_ID`, else `SLURM_JOB_ID`, else date, time and pid).
    pub fn run_id(mut self, id: impl Into<String>) -> Self {
        self.code.run_id = Some(id.into());
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

    /// Export timeout (else `OTEL_EXPORTER_OTLP_TIMEOUT`, else 10 s).
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.code.timeout = Some(timeout);
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

    /// Whether `install()` flushes completed spans on SIGINT and SIGTERM before letting the
    /// signal end the process (default: yes). Turn it off if your program handles these
    /// signals itself, and call [`Telemetry::flush`] from your handler.
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
        let filter = match std::env::var("RUST_LOG") {
            Ok(value) if !value.trim().is_empty() => tracing_subscriber::EnvFilter::try_new(&value)
                .map_err(|e| InitError::InvalidSetting {
                    name: "RUST_LOG".into(),
                    value: value.clone(),
                    expected: format!("a tracing filter such as info or mycrate=debug ({e})"),
                })?,
            _ => tracing_subscriber::EnvFilter::new("error"),
        };
        let mut telemetry = self.build()?;
        let events = tracing_subscriber::fmt::layer()
            .with_writer(std::io::stderr)
            .with_filter(filter);
        let subscriber = tracing_subscriber::registry()
            .with(telemetry.layer())
            .with(events);
        tracing::subscriber::set_global_default(subscriber)
            .map_err(|_| InitError::AlreadyInstalled)?;
        if let Some(inner) = &mut telemetry.inner {
            opentelemetry::global::set_tracer_provider(inner.tracer_provider.clone());
            opentelemetry::global::set_meter_provider(inner.meter_provider.clone());
            if inner.settings.flush_on_signal {
                crate::signals::flush_on_signal(
                    inner.tracer_provider.clone(),
                    inner.meter_provider.clone(),
                )
                .map_err(|source| InitError::Thread {
                    what: "signal",
                    source,
                })?;
            }
        }
        Ok(telemetry)
    }

    /// Sets everything up without touching global state; add [`Telemetry::layer`] to your
    /// own subscriber.
    ///
    /// # Errors
    /// See [`InitError`].
    pub fn build(self) -> Result<Telemetry, InitError> {
        let settings = config::resolve(&self.code)?;
        if settings.disabled {
            return Ok(Telemetry { inner: None });
        }
        let pictures = crate::report::setup::from_env(self.pictures, &settings)?;
        Inner::start(settings, self.source, pictures).map(|inner| Telemetry {
            inner: Some(Box::new(inner)),
        })
    }
}

/// One device's latest reading: see [`Telemetry::devices`].
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct DeviceMemory {
    /// Which device.
    pub device: crate::source::Device,
    /// Memory in use, in bytes.
    pub used: Option<u64>,
    /// Memory installed, in bytes.
    pub total: Option<u64>,
    /// Fraction of time the GPU was busy (0 to 1).
    pub utilization: Option<f64>,
}

/// The running telemetry: sampler, exporters and providers. Dropping it flushes and shuts
/// down; [`Telemetry::shutdown`] does the same and reports what went wrong.
#[derive(Debug)]
#[must_use = "dropping Telemetry shuts it down at once"]
pub struct Telemetry {
    inner: Option<Box<Inner>>,
}

struct Inner {
    settings: Settings,
    sampler: Sampler,
    state: Arc<LayerState>,
    tracer: SdkTracer,
    tracer_provider: SdkTracerProvider,
    meter_provider: SdkMeterProvider,
    runtime: Option<tokio::runtime::Runtime>,
    health: Vec<Arc<ExportHealth>>,
    run_dir: Option<PathBuf>,
    prometheus: Option<PrometheusEndpoint>,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Telemetry")
            .field("run_id", &self.settings.run_id)
            .field("traces", &self.settings.traces)
            .field("metrics", &self.settings.metrics)
            .field("run_dir", &self.run_dir)
            .finish_non_exhaustive()
    }
}

impl Telemetry {
    /// Starts configuring gpuspan in code.
    pub fn builder() -> Builder {
        Builder::default()
    }

    /// The tracing layer to add to your own subscriber (`None`, a no-op layer, when
    /// disabled). Spans opened by the macros under a subscriber with this layer record
    /// memory and are exported.
    pub fn layer<S>(&self) -> Option<impl Layer<S> + 'static>
    where
        S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    {
        let inner = self.inner.as_ref()?;
        let layer: Layered<
            MemoryLayer,
            tracing_opentelemetry::OpenTelemetryLayer<S, SdkTracer>,
            S,
        > = tracing_opentelemetry::layer()
            .with_tracer(inner.tracer.clone())
            .with_threads(false)
            .with_tracked_inactivity(false)
            .and_then(MemoryLayer(Arc::clone(&inner.state)));
        Some(layer)
    }

    /// `ml.run.id` of this run (`None` when disabled).
    pub fn run_id(&self) -> Option<&str> {
        self.inner.as_ref().map(|i| i.settings.run_id.as_str())
    }

    /// The run directory, when traces or metrics are written to one.
    pub fn run_dir(&self) -> Option<&Path> {
        self.inner.as_ref()?.run_dir.as_deref()
    }

    /// `gpu.memory.source`: `nvml`, `nvidia-smi`, the custom source's name, or `none`.
    pub fn memory_source(&self) -> Option<&str> {
        self.inner.as_ref().map(|i| i.state.shared.source_name())
    }

    /// The address the Prometheus endpoint listens on, when one was asked for.
    pub fn prometheus_addr(&self) -> Option<SocketAddr> {
        #[cfg(feature = "prometheus")]
        {
            self.inner.as_ref()?.prometheus.as_ref().map(|p| p.addr())
        }
        #[cfg(not(feature = "prometheus"))]
        {
            None
        }
    }

    /// Every device in scope with its latest reading (no device is read by this call).
    pub fn devices(&self) -> Vec<DeviceMemory> {
        let Some(inner) = &self.inner else {
            return Vec::new();
        };
        let shared = &inner.state.shared;
        let present = |v: u64| (v != crate::sampler::ABSENT).then_some(v);
        shared
            .devices()
            .iter()
            .enumerate()
            .map(|(i, device)| DeviceMemory {
                device: device.clone(),
                used: present(shared.latest(crate::sampler::figure::DEVICE0 + i)),
                total: present(shared.total(i)),
                utilization: shared.utilization(i),
            })
            .collect()
    }

    /// How the sampler kept its schedule so far.
    pub fn sampler_stats(&self) -> Option<SamplerStats> {
        self.inner.as_ref().map(|i| i.state.shared.stats())
    }

    /// Exports everything recorded so far without shutting down.
    ///
    /// # Errors
    /// The SDK's flush error, for example a timeout.
    pub fn flush(&self) -> Result<(), ShutdownError> {
        let Some(inner) = &self.inner else {
            return Ok(());
        };
        let traces = inner.tracer_provider.force_flush();
        let metrics = inner.meter_provider.force_flush();
        traces
            .and(metrics)
            .map_err(|e| ShutdownError::Sdk(e.to_string()))
    }

    /// Flushes, stops the sampler and exporters, and prints the run directory's summary.
    ///
    /// # Errors
    /// [`ShutdownError::Dropped`] when spans or points were lost (the destination was
    /// down or too slow); everything else was exported first.
    pub fn shutdown(mut self) -> Result<(), ShutdownError> {
        match self.inner.take() {
            Some(inner) => inner.shutdown(),
            None => Ok(()),
        }
    }
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        if let Some(inner) = self.inner.take() {
            if let Err(error) = inner.shutdown() {
                eprintln!("gpuspan: {error}");
            }
        }
    }
}

impl Inner {
    fn start(
        settings: Settings,
        custom_source: Option<Box<dyn MemorySource>>,
        pictures: crate::report::setup::Pictures,
    ) -> Result<Self, InitError> {
        let source = custom_source.or_else(|| open_gpu_source(&settings));
        let observers = crate::report::setup::observers(pictures, &settings, source.as_deref())?;
        let sampler =
            Sampler::start(source, settings.sample_interval, observers).map_err(|source| {
                InitError::Thread {
                    what: "sampler",
                    source,
                }
            })?;
        let resource = crate::resource::build(&settings);

        let uses_run_dir = [&settings.traces, &settings.metrics]
            .iter()
            .any(|d| matches!(d, Destination::RunDir));
        let run_dir = if uses_run_dir {
            let dir = settings.run_dir();
            std::fs::create_dir_all(&dir).map_err(|source| InitError::RunDir {
                path: dir.clone(),
                source,
            })?;
            Some(dir)
        } else {
            None
        };
        let mut pipes = Pipes {
            runtime: None,
            run_dir: run_dir.as_deref(),
            health: Vec::new(),
            taps: crate::report::setup::taps(pictures, &settings)?,
        };
        let tracer_provider = pipes.tracer_provider(&settings.traces, &resource)?;
        let tracer = tracer_provider.tracer("gpuspan");
        let meter_provider =
            pipes.meter_provider(&settings.metrics, &resource, settings.metric_interval)?;
        let Pipes {
            runtime, health, ..
        } = pipes;
        let prometheus = match settings.prometheus_addr {
            Some(addr) => Some(start_prometheus(addr, resource.clone())?),
            None => None,
        };
        let mut step_duration = Vec::new();
        let mut epoch_duration = Vec::new();
        #[allow(unused_mut)]
        let mut providers = vec![&meter_provider];
        #[cfg(feature = "prometheus")]
        providers.extend(prometheus.as_ref().map(|p| &p.provider));
        for (reader, provider) in providers.into_iter().enumerate() {
            let meter = opentelemetry::metrics::MeterProvider::meter(provider, "gpuspan");
            crate::metrics::register_gauges(&meter, sampler.shared(), reader);
            let (step, epoch) = crate::metrics::duration_histograms(&meter);
            step_duration.push(step);
            epoch_duration.push(epoch);
        }
        let state = Arc::new(LayerState {
            shared: Arc::clone(sampler.shared()),
            step_duration,
            epoch_duration,
            steps_closed: AtomicU64::new(0),
            epochs: Mutex::new(Vec::new()),
        });
        Ok(Self {
            settings,
            sampler,
            state,
            tracer,
            tracer_provider,
            meter_provider,
            runtime,
            health,
            run_dir,
            prometheus,
        })
    }

    fn shutdown(mut self: Box<Self>) -> Result<(), ShutdownError> {
        let timeout = [&self.settings.traces, &self.settings.metrics]
            .iter()
            .filter_map(|d| match d {
                Destination::Otlp(target) => Some(target.timeout),
                _ => None,
            })
            .max()
            .unwrap_or(Duration::from_secs(5))
            + Duration::from_secs(1);
        // Traces and metrics flush side by side, so a dead collector costs one timeout.
        let (traces, metrics) = std::thread::scope(|scope| {
            let metrics = scope.spawn(|| self.meter_provider.shutdown_with_timeout(timeout));
            let traces = self.tracer_provider.shutdown_with_timeout(timeout);
            (traces, metrics.join())
        });
        if let Some(mut prometheus) = self.prometheus.take() {
            prometheus.stop();
        }
        self.sampler.stop();
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }

        if self.settings.summary && self.settings.traces == Destination::RunDir {
            if let Some(dir) = &self.run_dir {
                // The rows kept as epochs closed: the same table `gpuspan report` reads back
                // from traces.jsonl, without parsing the whole file at exit.
                let mut epochs = match self.state.epochs.lock() {
                    Ok(mut epochs) => std::mem::take(&mut *epochs),
                    Err(_) => Vec::new(),
                };
                epochs.sort_by_key(|row| row.epoch);
                let summary = runlog::RunSummary {
                    epochs,
                    source: Some(self.state.shared.source_name().to_owned()),
                    bad_lines: Vec::new(),
                };
                eprint!(
                    "gpuspan: run {} ({})\n{}",
                    self.settings.run_id,
                    dir.display(),
                    summary.render()
                );
            }
        }

        let spans: u64 = self.health_dropped("span");
        let points: u64 = self.health_dropped("metric point");
        if spans > 0 || points > 0 {
            let destinations: Vec<&str> = self
                .health
                .iter()
                .filter(|h| h.dropped() > 0)
                .map(|h| h.destination.as_str())
                .collect();
            let reason = self
                .health
                .iter()
                .find_map(|h| h.last_error())
                .unwrap_or_else(|| "unknown".into());
            return Err(ShutdownError::Dropped {
                spans,
                points,
                destination: destinations.join(" and "),
                reason,
            });
        }
        let metrics = metrics.unwrap_or_else(|_| {
            Err(opentelemetry_sdk::error::OTelSdkError::InternalFailure(
                "metrics shutdown panicked".into(),
            ))
        });
        for result in [traces, metrics] {
            match result {
                Ok(()) | Err(opentelemetry_sdk::error::OTelSdkError::AlreadyShutdown) => {}
                Err(e) => return Err(ShutdownError::Sdk(e.to_string())),
            }
        }
        Ok(())
    }

    /// Items of one kind (`span`, `metric point`) lost across exporters.
    fn health_dropped(&self, item: &str) -> u64 {
        self.health
            .iter()
            .filter(|h| h.item() == item)
            .map(|h| h.dropped())
            .sum()
    }
}

#[cfg(feature = "prometheus")]
use crate::export::prometheus::PrometheusEndpoint;

#[cfg(feature = "prometheus")]
fn start_prometheus(
    addr: SocketAddr,
    resource: opentelemetry_sdk::Resource,
) -> Result<PrometheusEndpoint, InitError> {
    PrometheusEndpoint::start(addr, resource)
}

/// Stands in for the endpoint in builds without the `prometheus` feature.
#[cfg(not(feature = "prometheus"))]
#[derive(Debug)]
struct PrometheusEndpoint;

#[cfg(not(feature = "prometheus"))]
impl PrometheusEndpoint {
    fn stop(&mut self) {}
}

#[cfg(not(feature = "prometheus"))]
fn start_prometheus(
    addr: SocketAddr,
    _resource: opentelemetry_sdk::Resource,
) -> Result<PrometheusEndpoint, InitError> {
    Err(InitError::Prometheus {
        addr,
        reason:
            "this build leaves out the Prometheus endpoint: enable gpuspan's `prometheus` feature"
                .into(),
    })
}

/// Builds the export pipelines of both signals: the runtime OTLP needs (made on first use),
/// the run directory's files, and the loss counters reported at shutdown.
struct Pipes<'a> {
    runtime: Option<tokio::runtime::Runtime>,
    run_dir: Option<&'a Path>,
    health: Vec<Arc<ExportHealth>>,
    // Span taps (TensorBoard), given to the span pipeline.
    taps: Vec<Box<dyn crate::export::tap::SpanTap>>,
}

impl Pipes<'_> {
    fn runtime(&mut self) -> Result<tokio::runtime::Handle, InitError> {
        let runtime = match self.runtime.take() {
            Some(runtime) => runtime,
            None => otlp::runtime()?,
        };
        Ok(self.runtime.insert(runtime).handle().clone())
    }

    /// Standard output, or `file` in the run directory, with its name for messages.
    fn lines(&self, destination: &Destination, file: &str) -> Result<(Lines, String), InitError> {
        if *destination == Destination::Console {
            return Ok((Lines::stdout(), "standard output".to_owned()));
        }
        let path = self.run_dir.unwrap_or(Path::new(".")).join(file);
        let lines = Lines::file(&path).map_err(|source| InitError::RunDir {
            path: path.clone(),
            source,
        })?;
        Ok((lines, path.display().to_string()))
    }

    fn health(&mut self, destination: String, item: &'static str) -> Arc<ExportHealth> {
        let health = Arc::new(ExportHealth::new(destination, item));
        self.health.push(Arc::clone(&health));
        health
    }

    fn tracer_provider(
        &mut self,
        destination: &Destination,
        resource: &opentelemetry_sdk::Resource,
    ) -> Result<SdkTracerProvider, InitError> {
        let builder = SdkTracerProvider::builder().with_resource(resource.clone());
        let queue = QueueConfig::default();
        let spawn_error = |source| InitError::Thread {
            what: "span export",
            source,
        };
        let processor = match destination {
            Destination::None => return Ok(builder.build()),
            Destination::Otlp(target) => {
                let handle = self.runtime()?;
                let exporter = otlp::span_exporter(target, &handle)?;
                let health = self.health(target.endpoint.clone(), "span");
                let taps = std::mem::take(&mut self.taps);
                QueueProcessor::start(exporter, Some(handle), queue, health, taps)
            }
            Destination::RunDir | Destination::Console => {
                let (lines, name) = self.lines(destination, runlog::TRACES_FILE)?;
                let health = self.health(name, "span");
                let exporter = JsonlSpanExporter::new(lines, resource);
                let taps = std::mem::take(&mut self.taps);
                QueueProcessor::start(exporter, None, queue, health, taps)
            }
        };
        Ok(builder
            .with_span_processor(processor.map_err(spawn_error)?)
            .build())
    }

    fn meter_provider(
        &mut self,
        destination: &Destination,
        resource: &opentelemetry_sdk::Resource,
        interval: Duration,
    ) -> Result<SdkMeterProvider, InitError> {
        let builder = SdkMeterProvider::builder().with_resource(resource.clone());
        let builder = match destination {
            Destination::None => builder,
            Destination::Otlp(target) => {
                let handle = self.runtime()?;
                let health = self.health(target.endpoint.clone(), "metric point");
                let exporter = otlp::metric_exporter(target, &handle, health)?;
                builder.with_reader(
                    PeriodicReader::builder(exporter)
                        .with_interval(interval)
                        .build(),
                )
            }
            Destination::RunDir | Destination::Console => {
                let (lines, name) = self.lines(destination, runlog::METRICS_FILE)?;
                let health = self.health(name, "metric point");
                let exporter =
                    CountingMetricExporter::new(JsonlMetricExporter::new(lines), None, health);
                builder.with_reader(
                    PeriodicReader::builder(exporter)
                        .with_interval(interval)
                        .build(),
                )
            }
        };
        Ok(builder.build())
    }
}

/// NVML, else `nvidia-smi`, else no GPU source, with one clear warning. Never host memory
/// under a GPU name.
fn open_gpu_source(settings: &Settings) -> Option<Box<dyn MemorySource>> {
    #[cfg(feature = "nvml")]
    let why = match crate::source::nvml::NvmlSource::open(
        settings.nvml_lib.as_deref(),
        &settings.devices,
    ) {
        Ok(source) => return Some(Box::new(source)),
        Err(why) => why.0,
    };
    #[cfg(not(feature = "nvml"))]
    let why = "this build leaves out NVML (gpuspan's `nvml` feature)".to_owned();

    if let Some(program) = crate::source::smi::find_nvidia_smi() {
        match crate::source::smi::SmiSource::open(&program, &settings.devices) {
            Ok(source) => {
                eprintln!(
                    "gpuspan: warning: {why}; reading GPU memory from {} instead, every {} ms, \
                     so spikes shorter than that may be missed",
                    program.display(),
                    crate::source::smi::MIN_INTERVAL.as_millis()
                );
                return Some(Box::new(source));
            }
            Err(smi) => eprintln!(
                "gpuspan: warning: no GPU memory source: {why}, and {} failed ({smi}); spans \
                 carry host memory (process.memory.*) only",
                program.display()
            ),
        }
        return None;
    }
    eprintln!(
        "gpuspan: warning: no GPU memory source: {why}; spans carry host memory \
         (process.memory.*) only. Set GPUSPAN_NVML_LIB to the driver's libnvidia-ml.so.1 if it \
         is installed elsewhere."
    );
    None
}

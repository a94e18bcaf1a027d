//! Setting up and shutting down: `init()`, the [`Telemetry`] guard, and what it holds.

mod builder;
mod diagnose_setters;
mod findings;
pub(crate) mod gpu_source;
mod settings;
mod shutdown;

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::metrics::SdkMeterProvider;
use opentelemetry_sdk::trace::{SdkTracer, SdkTracerProvider};
use tracing_subscriber::Layer;

pub use builder::Builder;
pub use settings::{setting, settings};

use crate::config::{Destination, Settings};
use crate::destinations::Pipes;
use crate::error::{InitError, ShutdownError};
use crate::export::health::{ExportCounts, ExportHealth, ExportTally};
use crate::export::queue::QueueConfig;
use crate::export::tap::SpanTap;
use crate::layer::{GpuspanLayer, LayerState};
use crate::metrics::Durations;
use crate::runlog::SummaryTap;
use crate::sampler::{Sampler, SamplerStats};
use crate::signals::FlushedOn;
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
    /// The epoch table, kept by a span tap as spans are exported.
    epochs: SummaryTap,
    /// Set at shutdown.
    stopping: Arc<AtomicBool>,
    /// Leak, budget, batch-size fit and near-OOM findings.
    diagnosis: crate::diagnose::Diagnosis,
    /// Spans ended but not yet through the taps.
    span_backlog: crate::export::queue::Backlog,
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
        Some(
            GpuspanLayer::new(inner.tracer.clone(), Arc::clone(&inner.state))
                .and_then(inner.diagnosis.layer()),
        )
    }

    /// `ml.run.id` of this run (`None` when disabled).
    pub fn run_id(&self) -> Option<&str> {
        self.inner.as_ref().map(|i| i.settings.run_id.as_str())
    }

    /// The run directory, when traces or metrics are written to one.
    pub fn run_dir(&self) -> Option<&Path> {
        self.inner.as_ref()?.run_dir.as_deref()
    }

    /// Where diagnosis writes its files (near-OOM timelines), also when spans and metrics
    /// go elsewhere: the run directory's path, created on the first file.
    pub fn diagnosis_dir(&self) -> Option<PathBuf> {
        self.inner.as_ref().map(|i| i.settings.run_dir())
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
        shared
            .devices()
            .iter()
            .enumerate()
            .map(|(i, device)| DeviceMemory {
                device: device.clone(),
                used: shared.latest(crate::sampler::figure::DEVICE0 + i),
                total: shared.total(i),
                utilization: shared.utilization(i),
            })
            .collect()
    }

    /// How the sampler kept its schedule so far.
    pub fn sampler_stats(&self) -> Option<SamplerStats> {
        self.inner.as_ref().map(|i| i.state.shared.stats())
    }

    /// Exports everything recorded so far without shutting down, waiting at most the
    /// export timeout; traces and metrics are flushed side by side.
    ///
    /// # Errors
    /// The SDK's flush error, for example a timeout while the destination is unreachable
    /// (the spans stay queued and are retried).
    pub fn flush(&self) -> Result<(), ShutdownError> {
        let Some(inner) = &self.inner else {
            return Ok(());
        };
        let timeout = inner.export_timeout();
        // The duration histograms are fed by the span taps: every ended span goes through
        // them before the metrics are collected.
        inner
            .span_backlog
            .settle(std::time::Instant::now() + timeout.min(std::time::Duration::from_secs(1)));
        // Metrics flush on a thread of their own, waited for at most the export timeout:
        // a metric export may be retrying while the collector is down.
        let meter_provider = inner.meter_provider.clone();
        let (done, metrics_done) = std::sync::mpsc::sync_channel(1);
        let spawned = std::thread::Builder::new()
            .name("gpuspan-flush".into())
            .spawn(move || {
                let _ = done.send(meter_provider.force_flush());
            });
        let traces = inner.tracer_provider.force_flush();
        let metrics = match spawned {
            Ok(_) => metrics_done
                .recv_timeout(timeout + std::time::Duration::from_millis(500))
                .unwrap_or(Err(opentelemetry_sdk::error::OTelSdkError::Timeout(
                    timeout,
                ))),
            Err(e) => Err(opentelemetry_sdk::error::OTelSdkError::InternalFailure(
                e.to_string(),
            )),
        };
        traces.and(metrics).map_err(ShutdownError::Sdk)
    }

    /// Spans produced, delivered and lost so far (`delivered + lost + pending ==
    /// produced`). To read the final counts after [`Telemetry::shutdown`], keep an
    /// [`Telemetry::export_tally`] first.
    pub fn span_counts(&self) -> ExportCounts {
        self.export_tally().spans()
    }

    /// Metric data points produced, delivered and lost so far.
    pub fn point_counts(&self) -> ExportCounts {
        self.export_tally().points()
    }

    /// A handle on the export counts that stays readable after [`Telemetry::shutdown`]:
    ///
    /// ```no_run
    /// let telemetry = gpuspan::init()?;
    /// let tally = telemetry.export_tally();
    /// // ... train ...
    /// let result = telemetry.shutdown();
    /// let spans = tally.spans();
    /// assert_eq!(spans.delivered + spans.lost, spans.produced);
    /// # result?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn export_tally(&self) -> ExportTally {
        self.inner
            .as_ref()
            .map_or_else(ExportTally::default, |i| ExportTally::new(&i.health))
    }

    /// The event layer's filter `install()` uses (`RUST_LOG`, checked).
    pub(crate) fn log_filter(&self) -> Option<&str> {
        self.inner.as_ref()?.settings.log_filter.as_deref()
    }

    /// Sets the global OTel providers and the signal handler: `install()`'s global part.
    pub(crate) fn install_globals(&self) -> Result<(), InitError> {
        let Some(inner) = &self.inner else {
            return Ok(());
        };
        opentelemetry::global::set_tracer_provider(inner.tracer_provider.clone());
        opentelemetry::global::set_meter_provider(inner.meter_provider.clone());
        if inner.settings.flush_on_signal {
            inner.flush_on(FlushedOn::InterruptAndTerminate)?;
        }
        Ok(())
    }

    /// Flushes the completed spans and the metrics on SIGTERM, then lets the signal do what
    /// it would without gpuspan (see [`Builder::flush_on_signal`]), leaving SIGINT alone:
    /// for a runtime that turns SIGINT into an exception of its own and flushes on its way
    /// out, as the Python package does with `KeyboardInterrupt`. For telemetry built with
    /// `flush_on_signal(false)`; nothing when disabled.
    ///
    /// # Errors
    /// [`InitError::Thread`] when the flushing thread cannot start.
    #[doc(hidden)]
    pub fn flush_on_sigterm(&self) -> Result<(), InitError> {
        let Some(inner) = &self.inner else {
            return Ok(());
        };
        inner.flush_on(FlushedOn::Terminate)
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
            // Never panics (no unwrap, no thread whose spawn can fail unchecked, writes that
            // ignore a closed stderr), so a drop during a panic's unwinding cannot abort.
            if let Err(error) = inner.shutdown() {
                let _ = writeln!(std::io::stderr(), "gpuspan: {error}");
            }
        }
    }
}

impl Inner {
    /// Flushes the providers on the signals of `on`, within the bound the settings give.
    fn flush_on(&self, on: FlushedOn) -> Result<(), InitError> {
        crate::signals::flush_on(
            on,
            self.tracer_provider.clone(),
            self.meter_provider.clone(),
            crate::signals::flush_bound(&self.settings),
        )
        .map_err(|source| InitError::Thread {
            what: "signal",
            source,
        })
    }

    fn start(
        settings: Settings,
        custom_source: Option<Box<dyn MemorySource>>,
        mut observers: Vec<Box<dyn crate::timeline::TickObserver>>,
        diagnose: crate::diagnose::settings::DiagnoseSettings,
        pictures: crate::runlog::setup::Pictures,
    ) -> Result<Self, InitError> {
        let source = match custom_source {
            Some(source) => Some(source),
            None => gpu_source::open_gpu_source(&settings)?,
        };
        observers.extend(crate::runlog::setup::observers(
            pictures,
            &settings,
            source.as_deref(),
        )?);
        let board = crate::diagnose::peers::Board::for_run(&settings);
        let diagnosis = crate::diagnose::Diagnosis::start(diagnose, settings.run_dir(), board)
            .map_err(|source| InitError::Thread {
                what: "near-OOM recorder",
                source,
            })?;
        observers.extend(diagnosis.observers());
        let sampler = Sampler::start(
            source,
            settings.sample_interval,
            settings.power_interval,
            observers,
        )
        .map_err(|source| InitError::Thread {
            what: "sampler",
            source,
        })?;
        diagnosis.attach(sampler.shared());
        let resource = crate::resource::build(&settings);

        let uses_run_dir = [&settings.traces, &settings.metrics]
            .iter()
            .any(|d| **d == Destination::RunDir);
        let run_dir = if uses_run_dir {
            let dir = settings.run_dir();
            std::fs::create_dir_all(&dir).map_err(|source| InitError::RunDir {
                path: dir.clone(),
                source,
            })?;
            if let Err(error) = diagnosis.write_limits(&dir) {
                eprintln!(
                    "gpuspan: warning: cannot write {}: {error}; `gpuspan report` will not \
                     say the largest batch size that fits",
                    dir.join(crate::diagnose::LIMITS_FILE).display()
                );
            }
            Some(dir)
        } else {
            None
        };
        let stopping = Arc::new(AtomicBool::new(false));
        let mut pipes = Pipes {
            runtime: None,
            run_dir: run_dir.as_deref(),
            health: Vec::new(),
            stopping: Arc::clone(&stopping),
            span_backlog: Default::default(),
        };
        let meter_provider =
            pipes.meter_provider(&settings.metrics, &resource, settings.metric_interval)?;
        let prometheus = match settings.prometheus_addr {
            Some(addr) => Some(start_prometheus(addr, resource.clone())?),
            None => None,
        };
        let mut durations = Durations::default();
        let mut sampler_instruments = crate::metrics::SamplerInstruments::default();
        #[allow(unused_mut)]
        let mut providers = vec![&meter_provider];
        #[cfg(feature = "prometheus")]
        providers.extend(prometheus.as_ref().map(|p| &p.provider));
        for provider in providers {
            let meter = opentelemetry::metrics::MeterProvider::meter(provider, "gpuspan");
            crate::metrics::register_gauges(&meter, sampler.shared());
            durations.register(&meter);
            sampler_instruments.register(&meter, sampler.shared());
            diagnosis.register_metrics(&meter);
        }
        sampler.shared().set_meter(Box::new(sampler_instruments));
        let epochs = SummaryTap::default();
        let mut taps: Vec<Box<dyn SpanTap>> = vec![Box::new(durations)];
        taps.extend(crate::runlog::setup::taps(pictures, &settings)?);
        // Diagnosis first: the events it adds are part of what the other taps see.
        taps.splice(0..0, diagnosis.taps());
        if settings.traces == Destination::RunDir {
            taps.push(Box::new(epochs.clone()));
        }
        let queue = QueueConfig {
            capacity: settings.export_queue,
            ..QueueConfig::default()
        };
        let tracer_provider = pipes.tracer_provider(
            &settings.traces,
            &resource,
            queue,
            taps,
            Arc::clone(sampler.shared()),
            &settings.sampling,
        )?;
        if let Some(warning) = settings.sampling.warning() {
            eprintln!("{warning}");
        }
        let tracer = tracer_provider.tracer("gpuspan");
        let Pipes {
            runtime,
            health,
            span_backlog,
            ..
        } = pipes;
        #[cfg(feature = "prometheus")]
        if let Some(endpoint) = &prometheus {
            endpoint.settle_spans_before_scrapes(span_backlog.clone());
        }
        let state = Arc::new(LayerState {
            shared: Arc::clone(sampler.shared()),
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
            epochs,
            stopping,
            diagnosis,
            span_backlog,
        })
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

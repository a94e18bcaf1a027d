//! Wiring the export pipelines: the span queue with its taps, the meter providers, and what
//! the destinations share (the runtime OTLP needs, the run directory, each signal's
//! accounting). Which sink a signal gets is matched on its destination in `super`.

use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use opentelemetry_sdk::metrics::exporter::PushMetricExporter;
use opentelemetry_sdk::metrics::{MeterProviderBuilder, PeriodicReader, SdkMeterProvider};
use opentelemetry_sdk::trace::{SdkTracerProvider, SpanExporter};
use opentelemetry_sdk::Resource;

use crate::config::Destination;
use crate::error::InitError;
use crate::export::health::ExportHealth;
use crate::export::jsonl::Lines;
use crate::export::otlp;
use crate::export::queue::{QueueConfig, Transport};
use crate::export::spans::QueueProcessor;
use crate::export::tap::SpanTap;
use crate::export::transport_note::TransportNote;

/// Builds the export pipelines of both signals, and keeps what shutdown needs: the runtime
/// (made on first use) and each signal's accounting.
pub(crate) struct Pipes<'a> {
    pub(crate) runtime: Option<tokio::runtime::Runtime>,
    pub(crate) run_dir: Option<&'a Path>,
    pub(crate) health: Vec<Arc<ExportHealth>>,
    /// Set at shutdown: metric exports stop retrying.
    pub(crate) stopping: Arc<AtomicBool>,
    /// Spans ended but not yet through the taps (which feed the duration histograms).
    pub(crate) span_backlog: crate::export::queue::Backlog,
}

/// What the span queue starts with, whatever its sink.
pub(crate) struct SpanQueue<'r> {
    pub(crate) resource: &'r Resource,
    config: QueueConfig,
    taps: Vec<Box<dyn SpanTap>>,
    timeout: Duration,
    shared: Arc<crate::sampler::Shared>,
}

impl SpanQueue<'_> {
    /// Starts the export thread towards `sink`, accounted in `health`.
    pub(crate) fn start<E: SpanExporter + 'static>(
        self,
        sink: Transport<E>,
        health: Arc<ExportHealth>,
    ) -> Result<QueueProcessor, InitError> {
        let Self {
            config,
            taps,
            timeout,
            shared,
            ..
        } = self;
        QueueProcessor::start(sink, config, health, taps, timeout, shared).map_err(|source| {
            InitError::Thread {
                what: "span export",
                source,
            }
        })
    }
}

impl Pipes<'_> {
    /// The runtime async exporters run on, made on first use.
    pub(crate) fn runtime(&mut self) -> Result<tokio::runtime::Handle, InitError> {
        let runtime = match self.runtime.take() {
            Some(runtime) => runtime,
            None => otlp::runtime()?,
        };
        Ok(self.runtime.insert(runtime).handle().clone())
    }

    /// `file` in the run directory, with its name for messages.
    pub(crate) fn run_dir_file(&self, file: &str) -> Result<(Lines, String), InitError> {
        let path = self.run_dir.unwrap_or(Path::new(".")).join(file);
        let lines = Lines::file(&path).map_err(|source| InitError::RunDir {
            path: path.clone(),
            source,
        })?;
        Ok((lines, path.display().to_string()))
    }

    /// The accounting of one signal towards `destination`, kept for shutdown's report.
    pub(crate) fn health(
        &mut self,
        destination: String,
        item: &'static str,
        note: Option<Arc<TransportNote>>,
    ) -> Arc<ExportHealth> {
        let health = ExportHealth::new(destination, item);
        let health = Arc::new(match note {
            Some(note) => health.with_note(note),
            None => health,
        });
        self.health.push(Arc::clone(&health));
        health
    }

    /// The tracer provider: every span passes `taps` on the export thread, then goes to
    /// `destination` (or nowhere, still through the taps, when it is `none`).
    pub(crate) fn tracer_provider(
        &mut self,
        destination: &Destination,
        resource: &Resource,
        queue: QueueConfig,
        taps: Vec<Box<dyn SpanTap>>,
        shared: Arc<crate::sampler::Shared>,
        sampling: &crate::config::Sampling,
    ) -> Result<SdkTracerProvider, InitError> {
        let builder = SdkTracerProvider::builder()
            .with_resource(resource.clone())
            .with_sampler(sampling.sampler());
        let queue = SpanQueue {
            resource,
            config: queue,
            taps,
            timeout: destination.timeout(),
            shared,
        };
        let processor = self.spans_to(destination, queue)?;
        self.span_backlog = processor.backlog();
        Ok(builder.with_span_processor(processor).build())
    }

    /// The meter provider of `destination`, exporting every `interval`.
    pub(crate) fn meter_provider(
        &mut self,
        destination: &Destination,
        resource: &Resource,
        interval: Duration,
    ) -> Result<SdkMeterProvider, InitError> {
        let builder = SdkMeterProvider::builder().with_resource(resource.clone());
        Ok(self.metrics_to(destination, builder, interval)?.build())
    }
}

/// `builder` with a reader that pushes to `exporter` every `interval`.
pub(super) fn periodic(
    builder: MeterProviderBuilder,
    exporter: impl PushMetricExporter,
    interval: Duration,
) -> MeterProviderBuilder {
    builder.with_reader(
        PeriodicReader::builder(exporter)
            .with_interval(interval)
            .build(),
    )
}

//! Wiring the export pipelines: the span queue with its taps, the meter providers, the
//! run directory's files, and the runtime OTLP needs.

use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider};
use opentelemetry_sdk::trace::SdkTracerProvider;

use crate::config::Destination;
use crate::error::InitError;
use crate::export::health::ExportHealth;
use crate::export::jsonl::{JsonlMetricExporter, JsonlSpanExporter, Lines, NullSpanExporter};
use crate::export::metrics::CountingMetricExporter;
use crate::export::otlp;
use crate::export::queue::{QueueConfig, Transport};
use crate::export::spans::QueueProcessor;
use crate::export::tap::SpanTap;
use crate::runlog;

/// Builds the export pipelines of both signals, and keeps what shutdown needs: the runtime
/// (made on first use) and each signal's accounting.
pub(super) struct Pipes<'a> {
    pub(super) runtime: Option<tokio::runtime::Runtime>,
    pub(super) run_dir: Option<&'a Path>,
    pub(super) health: Vec<Arc<ExportHealth>>,
    /// Set at shutdown: metric exports stop retrying.
    pub(super) stopping: Arc<AtomicBool>,
    /// Spans ended but not yet through the taps (which feed the duration histograms).
    pub(super) span_backlog: crate::export::queue::Backlog,
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

    /// The tracer provider: every span passes `taps` on the export thread, then goes to
    /// `destination` (or nowhere, still through the taps, when it is `none`).
    pub(super) fn tracer_provider(
        &mut self,
        destination: &Destination,
        resource: &opentelemetry_sdk::Resource,
        queue: QueueConfig,
        taps: Vec<Box<dyn SpanTap>>,
        shared: Arc<crate::sampler::Shared>,
        sampling: &crate::config::Sampling,
    ) -> Result<SdkTracerProvider, InitError> {
        let builder = SdkTracerProvider::builder()
            .with_resource(resource.clone())
            .with_sampler(sampling.sampler());
        let timeout = destination.timeout();
        let spawn_error = |source| InitError::Thread {
            what: "span export",
            source,
        };
        let processor = match destination {
            Destination::None => {
                let health = self.health("nowhere (OTEL_TRACES_EXPORTER=none)".into(), "span");
                QueueProcessor::start(
                    Transport::Local(NullSpanExporter),
                    queue,
                    health,
                    taps,
                    timeout,
                    shared,
                )
            }
            Destination::Otlp(target) => {
                let handle = self.runtime()?;
                let exporter = otlp::span_exporter(target, &handle)?;
                let health = self.health(target.endpoint.clone(), "span");
                let sink = Transport::Remote(Arc::new(exporter), handle);
                QueueProcessor::start(sink, queue, health, taps, timeout, shared)
            }
            Destination::RunDir | Destination::Console => {
                let (lines, name) = self.lines(destination, runlog::TRACES_FILE)?;
                let health = self.health(name, "span");
                let exporter = JsonlSpanExporter::new(lines, resource);
                QueueProcessor::start(
                    Transport::Local(exporter),
                    queue,
                    health,
                    taps,
                    timeout,
                    shared,
                )
            }
        };
        let processor = processor.map_err(spawn_error)?;
        self.span_backlog = processor.backlog();
        Ok(builder.with_span_processor(processor).build())
    }

    /// The meter provider of `destination`, exporting every `interval`.
    pub(super) fn meter_provider(
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
                let exporter = otlp::metric_exporter(
                    target,
                    &handle,
                    health,
                    interval,
                    self.stopping.clone(),
                )?;
                builder.with_reader(
                    PeriodicReader::builder(exporter)
                        .with_interval(interval)
                        .build(),
                )
            }
            Destination::RunDir | Destination::Console => {
                let (lines, name) = self.lines(destination, runlog::METRICS_FILE)?;
                let health = self.health(name, "metric point");
                let exporter = CountingMetricExporter::new(
                    JsonlMetricExporter::new(lines),
                    None,
                    health,
                    Duration::ZERO,
                    self.stopping.clone(),
                );
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

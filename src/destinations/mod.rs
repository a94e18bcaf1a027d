//! What each destination (`otlp`, `console`, `none`, `run_dir`) builds, matched here once
//! for everything: the SDK's span queue, a metric reader, `gpuspan collect`'s forwarding,
//! and the name people read. A new exporter is a variant of [`Exporter`] and of
//! [`Destination`], and an arm in each match of this file.
//!
//! Threading: everything here runs once, on the thread that sets gpuspan or the collector
//! up; what it builds runs on the export queue's thread, a metric reader's thread, or the
//! runtime of an async exporter.
//!
//! [`Exporter`]: crate::settings::Exporter

#[cfg(feature = "pipeline")]
mod forward;
mod pipes;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use opentelemetry_sdk::metrics::MeterProviderBuilder;

use crate::config::Destination;
use crate::error::InitError;
use crate::export::jsonl::{JsonlMetricExporter, JsonlSpanExporter, Lines, NullSpanExporter};
use crate::export::metrics::CountingMetricExporter;
use crate::export::otlp;
use crate::export::queue::Transport;
use crate::export::spans::QueueProcessor;
use crate::runlog;

#[cfg(feature = "pipeline")]
use forward::LineFile;
#[cfg(feature = "pipeline")]
pub use forward::{ForwardTarget, OpenError};
pub(crate) use pipes::{Pipes, SpanQueue};

/// Where `destination` sends, for people: `gpuspan collect`'s banner and the export
/// report. `run_dir` is the run directory in use, if any.
pub fn describe(destination: &Destination, run_dir: Option<&Path>) -> String {
    match destination {
        Destination::None => "nowhere (OTEL_TRACES_EXPORTER=none)".into(),
        Destination::Console => "standard output".into(),
        Destination::RunDir => {
            run_dir.map_or("the run directory".into(), |d| d.display().to_string())
        }
        Destination::Otlp(target) => target.endpoint.clone(),
    }
}

impl Pipes<'_> {
    /// Starts the SDK's span queue with `destination` as its sink (`none` still runs the
    /// taps and counts every span).
    pub(crate) fn spans_to(
        &mut self,
        destination: &Destination,
        queue: SpanQueue<'_>,
    ) -> Result<QueueProcessor, InitError> {
        let name = describe(destination, self.run_dir);
        let (lines, name) = match destination {
            Destination::None => {
                let health = self.health(name, "span", None);
                return queue.start(Transport::Local(NullSpanExporter), health);
            }
            Destination::Otlp(target) => {
                let handle = self.runtime()?;
                let note = otlp::TransportNote::new(target);
                let exporter = otlp::span_exporter(target, &handle, &note)?;
                let health = self.health(name, "span", Some(note));
                return queue.start(Transport::Remote(Arc::new(exporter), handle), health);
            }
            Destination::Console => (Lines::stdout(), name),
            Destination::RunDir => self.run_dir_file(runlog::TRACES_FILE)?,
        };
        let health = self.health(name, "span", None);
        let exporter = JsonlSpanExporter::new(lines, queue.resource);
        queue.start(Transport::Local(exporter), health)
    }

    /// Adds a reader exporting to `destination` every `interval` to `builder` (none when
    /// the points go nowhere).
    pub(crate) fn metrics_to(
        &mut self,
        destination: &Destination,
        builder: MeterProviderBuilder,
        interval: Duration,
    ) -> Result<MeterProviderBuilder, InitError> {
        let name = describe(destination, self.run_dir);
        let (lines, name) = match destination {
            Destination::None => return Ok(builder),
            Destination::Otlp(target) => {
                let handle = self.runtime()?;
                let note = otlp::TransportNote::new(target);
                let health = self.health(name, "metric point", Some(note));
                let stopping = self.stopping.clone();
                let exporter = otlp::metric_exporter(target, &handle, health, interval, stopping)?;
                return Ok(pipes::periodic(builder, exporter, interval));
            }
            Destination::Console => (Lines::stdout(), name),
            Destination::RunDir => self.run_dir_file(runlog::METRICS_FILE)?,
        };
        let health = self.health(name, "metric point", None);
        let exporter = CountingMetricExporter::new(
            JsonlMetricExporter::new(lines),
            None,
            health,
            Duration::ZERO,
            self.stopping.clone(),
        );
        Ok(pipes::periodic(builder, exporter, interval))
    }
}

/// Where `gpuspan collect` forwards one signal's requests: `file` is that signal's file in
/// the run directory, and a remote target sends on `runtime`.
///
/// # Errors
/// The destination's file cannot be opened, or its OTLP client cannot be built.
#[cfg(feature = "pipeline")]
pub fn forward(
    destination: &Destination,
    run_dir: Option<&Path>,
    file: &str,
    runtime: &tokio::runtime::Handle,
) -> Result<Transport<ForwardTarget>, OpenError> {
    let local = match destination {
        Destination::None => ForwardTarget::Nowhere,
        Destination::Console => ForwardTarget::Lines(LineFile::stdout()),
        Destination::RunDir => {
            let path = run_dir.unwrap_or(Path::new(".")).join(file);
            ForwardTarget::Lines(LineFile::append(&path)?)
        }
        Destination::Otlp(target) => {
            let client = otlp::request::RequestClient::new(target, runtime)?;
            let remote = Arc::new(ForwardTarget::Otlp(client));
            return Ok(Transport::Remote(remote, runtime.clone()));
        }
    };
    Ok(Transport::Local(local))
}

//! `run_dir`: OTLP/JSON lines in the run directory (`traces.jsonl`, `metrics.jsonl`), which
//! `gpuspan report` reads back.

use std::path::Path;
use std::time::Duration;

use opentelemetry_sdk::metrics::MeterProviderBuilder;

use super::{ExporterKind, Pipes, SpanQueue};
#[cfg(feature = "collect")]
use super::{ForwardTarget, LineFile, OpenError};
use crate::config::{Destination, Exporter};
use crate::error::InitError;
#[cfg(feature = "collect")]
use crate::export::queue::Transport;
use crate::export::spans::QueueProcessor;
use crate::runlog;

/// The `run_dir` exporter.
pub(super) struct RunDir;

impl ExporterKind for RunDir {
    fn exporter(&self) -> Exporter {
        Exporter::RunDir
    }

    fn describe(&self, _: &Destination, run_dir: Option<&Path>) -> String {
        run_dir.map_or("the run directory".into(), |d| d.display().to_string())
    }

    fn spans(
        &self,
        pipes: &mut Pipes<'_>,
        _: &Destination,
        queue: SpanQueue<'_>,
    ) -> Result<QueueProcessor, InitError> {
        let (lines, name) = pipes.run_dir_file(runlog::TRACES_FILE)?;
        pipes.json_spans(lines, name, queue)
    }

    fn metrics(
        &self,
        pipes: &mut Pipes<'_>,
        _: &Destination,
        builder: MeterProviderBuilder,
        interval: Duration,
    ) -> Result<MeterProviderBuilder, InitError> {
        let (lines, name) = pipes.run_dir_file(runlog::METRICS_FILE)?;
        Ok(pipes.json_metrics(lines, name, builder, interval))
    }

    #[cfg(feature = "collect")]
    fn forward(
        &self,
        _: &Destination,
        run_dir: Option<&Path>,
        file: &str,
        _: &tokio::runtime::Handle,
    ) -> Result<Transport<ForwardTarget>, OpenError> {
        let path = run_dir.unwrap_or(Path::new(".")).join(file);
        Ok(Transport::Local(ForwardTarget::Lines(LineFile::append(
            &path,
        )?)))
    }
}

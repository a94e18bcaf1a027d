//! The destinations a signal can go to, one file each, and the one list of them: what an
//! exporter's name (`otlp`, `console`, `none`, `run_dir`) builds for the SDK's spans, for
//! the metric readers, and for `gpuspan collect`'s forwarding. Code that wires a pipeline
//! looks the destination's kind up here instead of matching on the exporter.
//!
//! Threading: everything here runs once, on the thread that sets gpuspan or the collector
//! up; what it builds runs on the export queue's thread, a metric reader's thread, or the
//! runtime of an async exporter.

#[cfg(feature = "collect")]
mod forward;
mod pipes;

use std::path::Path;
use std::time::Duration;

use opentelemetry_sdk::metrics::MeterProviderBuilder;

use crate::config::{Destination, Exporter, OtlpTarget};
use crate::error::InitError;
#[cfg(feature = "collect")]
use crate::export::queue::Transport;
use crate::export::spans::QueueProcessor;

#[cfg(feature = "collect")]
pub(crate) use forward::{ForwardTarget, OpenError};
pub(crate) use pipes::{Pipes, SpanQueue};

// Every destination (`KINDS`), one file each in `kinds/`; each is the kind of one
// [`Exporter`]. The build script lists that folder, so a new file is in the list.
include!(concat!(env!("OUT_DIR"), "/exporter_kinds.rs"));

/// Where an exporter puts what it is given, whichever the signal.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Outlet<'d> {
    /// Nowhere: spans still pass the taps and are counted; metric points are not read.
    Nowhere,
    /// OTLP/JSON lines on standard output.
    Stdout,
    /// OTLP/JSON lines in the run directory, a file for each signal.
    RunDir,
    /// To a collector over OTLP, with this signal's endpoint and options.
    Otlp(&'d OtlpTarget),
}

impl Outlet<'_> {
    /// Where it sends, for people; `run_dir` is the run directory in use, if any.
    fn describe(self, run_dir: Option<&Path>) -> String {
        match self {
            Outlet::Nowhere => "nowhere (OTEL_TRACES_EXPORTER=none)".into(),
            Outlet::Stdout => "standard output".into(),
            Outlet::RunDir => {
                run_dir.map_or("the run directory".into(), |d| d.display().to_string())
            }
            Outlet::Otlp(target) => target.endpoint.clone(),
        }
    }
}

/// One exporter: its name and where it puts what it is given. A kind with a transport of
/// its own (none has one yet) would override the methods that build from the outlet.
pub(crate) trait ExporterKind: Sync {
    /// The exporter it is, which gives its name in the environment, the command line and
    /// Python.
    fn exporter(&self) -> Exporter;

    /// Where it sends, with the settings configuration resolved for it in `destination`.
    fn outlet<'d>(&self, destination: &'d Destination) -> Result<Outlet<'d>, KindError>;

    /// Where it sends, for people: `gpuspan collect`'s banner and messages. `run_dir` is
    /// the run directory in use, if any.
    #[cfg(feature = "collect")]
    fn describe(&self, destination: &Destination, run_dir: Option<&Path>) -> String {
        self.outlet(destination)
            .map_or_else(|e| e.to_string(), |outlet| outlet.describe(run_dir))
    }

    /// Starts the SDK's span queue with this destination as its sink.
    fn spans(
        &self,
        pipes: &mut Pipes<'_>,
        destination: &Destination,
        queue: SpanQueue<'_>,
    ) -> Result<QueueProcessor, InitError> {
        let outlet = self
            .outlet(destination)
            .map_err(|e| e.setting_up("traces"))?;
        pipes.spans_to(outlet, queue)
    }

    /// Adds its metric reader, exporting every `interval`, to `builder` (none when the
    /// points go nowhere).
    fn metrics(
        &self,
        pipes: &mut Pipes<'_>,
        destination: &Destination,
        builder: MeterProviderBuilder,
        interval: Duration,
    ) -> Result<MeterProviderBuilder, InitError> {
        let outlet = self
            .outlet(destination)
            .map_err(|e| e.setting_up("metrics"))?;
        pipes.metrics_to(outlet, builder, interval)
    }

    /// Where `gpuspan collect` forwards one signal's requests; `file` is that signal's
    /// file in the run directory, and a remote target sends on `runtime`.
    #[cfg(feature = "collect")]
    fn forward(
        &self,
        destination: &Destination,
        run_dir: Option<&Path>,
        file: &str,
        runtime: &tokio::runtime::Handle,
    ) -> Result<Transport<ForwardTarget>, OpenError> {
        ForwardTarget::open(self.outlet(destination)?, run_dir, file, runtime)
    }
}

/// Why a destination has nothing to build it.
#[derive(Debug, thiserror::Error)]
pub(crate) enum KindError {
    #[error("the {0} exporter is not in this build's list of destinations")]
    Unlisted(Exporter),
    #[error("the {0} exporter was given another exporter's settings")]
    Mismatched(Exporter),
}

impl KindError {
    /// As the error of setting up `signal` (`traces` or `metrics`).
    pub(crate) fn setting_up(self, signal: &'static str) -> InitError {
        let exporter = match &self {
            KindError::Unlisted(exporter) | KindError::Mismatched(exporter) => *exporter,
        };
        InitError::Exporter {
            signal,
            endpoint: exporter.to_string(),
            reason: self.to_string(),
        }
    }
}

/// The kind of `exporter`.
pub(crate) fn kind(exporter: Exporter) -> Result<&'static dyn ExporterKind, KindError> {
    KINDS
        .iter()
        .copied()
        .find(|kind| kind.exporter() == exporter)
        .ok_or(KindError::Unlisted(exporter))
}

/// Where `destination` sends, for people; `run_dir` is the run directory in use, if any.
#[cfg(feature = "collect")]
pub(crate) fn describe(destination: &Destination, run_dir: Option<&Path>) -> String {
    match kind(destination.exporter()) {
        Ok(kind) => kind.describe(destination, run_dir),
        Err(_) => destination.exporter().to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_exporter_has_one_kind() {
        for exporter in Exporter::ALL {
            let kinds = KINDS.iter().filter(|k| k.exporter() == exporter).count();
            assert_eq!(kinds, 1, "{exporter} has {kinds} kinds in KINDS");
        }
        assert_eq!(KINDS.len(), Exporter::ALL.len());
    }
}

//! `console`: OTLP/JSON lines on standard output, one a span, a metric export or a
//! forwarded request.

use std::path::Path;
use std::time::Duration;

use opentelemetry_sdk::metrics::MeterProviderBuilder;

use super::{ExporterKind, Pipes, SpanQueue};
#[cfg(feature = "collect")]
use super::{ForwardTarget, LineFile, OpenError};
use crate::config::{Destination, Exporter};
use crate::error::InitError;
use crate::export::jsonl::Lines;
#[cfg(feature = "collect")]
use crate::export::queue::Transport;
use crate::export::spans::QueueProcessor;

/// The `console` exporter.
pub(super) struct Console;

const STDOUT: &str = "standard output";

impl ExporterKind for Console {
    fn exporter(&self) -> Exporter {
        Exporter::Console
    }

    fn describe(&self, _: &Destination, _: Option<&Path>) -> String {
        STDOUT.into()
    }

    fn spans(
        &self,
        pipes: &mut Pipes<'_>,
        destination: &Destination,
        queue: SpanQueue<'_>,
    ) -> Result<QueueProcessor, InitError> {
        let name = self.describe(destination, None);
        pipes.json_spans(Lines::stdout(), name, queue)
    }

    fn metrics(
        &self,
        pipes: &mut Pipes<'_>,
        destination: &Destination,
        builder: MeterProviderBuilder,
        interval: Duration,
    ) -> Result<MeterProviderBuilder, InitError> {
        let name = self.describe(destination, None);
        Ok(pipes.json_metrics(Lines::stdout(), name, builder, interval))
    }

    #[cfg(feature = "collect")]
    fn forward(
        &self,
        _: &Destination,
        _: Option<&Path>,
        _: &str,
        _: &tokio::runtime::Handle,
    ) -> Result<Transport<ForwardTarget>, OpenError> {
        Ok(Transport::Local(ForwardTarget::Lines(LineFile::stdout())))
    }
}

//! `none`: nowhere. Spans still pass the taps (summary, diagnosis, pictures) and are
//! counted; metric points are not read at all.

use std::path::Path;
use std::time::Duration;

use opentelemetry_sdk::metrics::MeterProviderBuilder;

use super::{ExporterKind, Pipes, SpanQueue};
#[cfg(feature = "collect")]
use super::{ForwardTarget, OpenError};
use crate::config::{Destination, Exporter};
use crate::error::InitError;
use crate::export::jsonl::NullSpanExporter;
use crate::export::queue::Transport;
use crate::export::spans::QueueProcessor;

/// The `none` exporter.
pub(super) struct Nowhere;

const NOWHERE: &str = "nowhere (OTEL_TRACES_EXPORTER=none)";

impl ExporterKind for Nowhere {
    fn exporter(&self) -> Exporter {
        Exporter::None
    }

    fn describe(&self, _: &Destination, _: Option<&Path>) -> String {
        NOWHERE.into()
    }

    fn spans(
        &self,
        pipes: &mut Pipes<'_>,
        destination: &Destination,
        queue: SpanQueue<'_>,
    ) -> Result<QueueProcessor, InitError> {
        let health = pipes.health(self.describe(destination, None), "span");
        queue.start(Transport::Local(NullSpanExporter), health)
    }

    fn metrics(
        &self,
        _: &mut Pipes<'_>,
        _: &Destination,
        builder: MeterProviderBuilder,
        _: Duration,
    ) -> Result<MeterProviderBuilder, InitError> {
        Ok(builder)
    }

    #[cfg(feature = "collect")]
    fn forward(
        &self,
        _: &Destination,
        _: Option<&Path>,
        _: &str,
        _: &tokio::runtime::Handle,
    ) -> Result<Transport<ForwardTarget>, OpenError> {
        Ok(Transport::Local(ForwardTarget::Nowhere))
    }
}

//! `otlp`: to a collector over gRPC or HTTP, with the endpoint and options configuration
//! resolved for each signal. Sends on a runtime, so no export thread waits on the network.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use opentelemetry_sdk::metrics::MeterProviderBuilder;

use super::pipes::periodic;
use super::{ExporterKind, KindError, Pipes, SpanQueue};
#[cfg(feature = "collect")]
use super::{ForwardTarget, OpenError};
use crate::config::{Destination, Exporter, OtlpTarget};
use crate::error::InitError;
use crate::export::otlp;
#[cfg(feature = "collect")]
use crate::export::otlp::request::RequestClient;
use crate::export::queue::Transport;
use crate::export::spans::QueueProcessor;

/// The `otlp` exporter.
pub(super) struct Otlp;

/// The endpoint and options of `destination`.
fn target(destination: &Destination) -> Result<&OtlpTarget, KindError> {
    match destination {
        Destination::Otlp(target) => Ok(target),
        Destination::Plain(_) => Err(KindError::Mismatched(Exporter::Otlp)),
    }
}

impl ExporterKind for Otlp {
    fn exporter(&self) -> Exporter {
        Exporter::Otlp
    }

    fn describe(&self, destination: &Destination, _: Option<&Path>) -> String {
        target(destination).map_or_else(|e| e.to_string(), |t| t.endpoint.clone())
    }

    fn spans(
        &self,
        pipes: &mut Pipes<'_>,
        destination: &Destination,
        queue: SpanQueue<'_>,
    ) -> Result<QueueProcessor, InitError> {
        let target = target(destination).map_err(|e| e.setting_up("traces"))?;
        let handle = pipes.runtime()?;
        let exporter = otlp::span_exporter(target, &handle)?;
        let health = pipes.health(target.endpoint.clone(), "span");
        queue.start(Transport::Remote(Arc::new(exporter), handle), health)
    }

    fn metrics(
        &self,
        pipes: &mut Pipes<'_>,
        destination: &Destination,
        builder: MeterProviderBuilder,
        interval: Duration,
    ) -> Result<MeterProviderBuilder, InitError> {
        let target = target(destination).map_err(|e| e.setting_up("metrics"))?;
        let handle = pipes.runtime()?;
        let health = pipes.health(target.endpoint.clone(), "metric point");
        let stopping = pipes.stopping.clone();
        let exporter = otlp::metric_exporter(target, &handle, health, interval, stopping)?;
        Ok(periodic(builder, exporter, interval))
    }

    #[cfg(feature = "collect")]
    fn forward(
        &self,
        destination: &Destination,
        _: Option<&Path>,
        _: &str,
        runtime: &tokio::runtime::Handle,
    ) -> Result<Transport<ForwardTarget>, OpenError> {
        let client = RequestClient::new(target(destination)?, runtime)?;
        Ok(Transport::Remote(
            Arc::new(ForwardTarget::Otlp(client)),
            runtime.clone(),
        ))
    }
}

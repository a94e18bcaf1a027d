//! Where an export queue's batches go, and what became of them.
//!
//! A [`Sink`] takes a batch of the queue's items and says how many the destination
//! accepted, and whether the rest may be sent again. The queue does everything else
//! (buffering, backoff, accounting), so the SDK's span exporter and the collector's request
//! forwarder are two small sinks behind one queue.

use std::future::Future;
use std::sync::Arc;

use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::{SpanData, SpanExporter};
use opentelemetry_sdk::Resource;

/// A destination for a queue's batches.
pub trait Sink: Send + Sync + 'static {
    /// What waits in the queue and is sent.
    type Item: Send + Sync + 'static;

    /// The accounted items one queued item stands for (a span: one; a forwarded request:
    /// its spans), so `delivered + lost == produced` holds in the units users count.
    fn units(_item: &Self::Item) -> u64 {
        1
    }

    /// Sends `batch`, oldest first. A remote sink runs on the export runtime while the
    /// queue holds the same batch for a retry, hence the shared list: a sink that needs the
    /// items by value copies them (a local sink is handed the only reference).
    fn send(
        &self,
        batch: Arc<Vec<Self::Item>>,
    ) -> impl Future<Output = Result<(), Undelivered>> + Send;

    /// The program's resource, before the first batch.
    fn set_resource(&mut self, _resource: &Resource) {}

    /// Writes out what the sink buffers (local sinks).
    fn flush(&self) -> OTelSdkResult {
        Ok(())
    }

    /// Ends the sink; called once, after the last batch.
    fn shutdown(&self) -> OTelSdkResult {
        Ok(())
    }
}

/// Part of a batch the destination did not accept.
#[derive(Debug)]
pub struct Undelivered {
    /// The first `delivered` items were accepted; the rest were not.
    pub delivered: usize,
    /// The rest may be sent again (an outage, a timeout); else they are counted lost.
    pub retry: bool,
    /// Why they were not.
    pub error: SinkError,
}

impl Undelivered {
    /// Nothing was accepted; the batch may be sent again.
    pub fn retry(error: impl Into<SinkError>) -> Self {
        Self {
            delivered: 0,
            retry: true,
            error: error.into(),
        }
    }
}

/// Why a sink did not deliver.
#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    /// The OpenTelemetry exporter failed.
    #[error(transparent)]
    Exporter(#[from] OTelSdkError),
    /// A forwarded request was not accepted.
    #[cfg(feature = "pipeline")]
    #[error(transparent)]
    Request(#[from] super::otlp::request::RequestError),
    /// A line could not be written (a file in the run directory, standard output).
    #[error("cannot write the line: {0}")]
    Write(#[from] std::io::Error),
    /// The export task panicked or was cancelled.
    #[error("the export task failed: {0}")]
    Task(#[from] tokio::task::JoinError),
}

/// An OpenTelemetry span exporter as a sink (its own until the queue starts, so the
/// resource reaches it).
#[derive(Debug)]
pub(crate) struct Exporter<E>(pub(crate) Arc<E>);

impl<E: SpanExporter + 'static> Sink for Exporter<E> {
    type Item = SpanData;

    async fn send(&self, batch: Arc<Vec<SpanData>>) -> Result<(), Undelivered> {
        // A remote export copies the spans here, where the copy is encoded and freed, so no
        // allocation crosses threads for it; a local one owns them.
        let batch = Arc::try_unwrap(batch).unwrap_or_else(|shared| shared.to_vec());
        self.0.export(batch).await.map_err(Undelivered::retry)
    }

    fn set_resource(&mut self, resource: &Resource) {
        if let Some(exporter) = Arc::get_mut(&mut self.0) {
            exporter.set_resource(resource);
        }
    }

    fn flush(&self) -> OTelSdkResult {
        self.0.force_flush()
    }

    fn shutdown(&self) -> OTelSdkResult {
        self.0.shutdown()
    }
}

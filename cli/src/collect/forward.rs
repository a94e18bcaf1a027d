//! Where the collector sends what it received: the target `crate::destinations::forward`
//! builds from its destination (the OTLP endpoint the standard variables name, the run
//! directory's OTLP/JSON files, standard output, or nowhere). One [`Forward`] per signal is
//! the sink of that signal's export queue, which does the buffering, retries and accounting.
//!
//! Threading: a remote forward sends on the collector's runtime, a local one writes on the
//! export queue's thread.

use std::marker::PhantomData;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;

use super::budget::Held;
use gpuspan::pipeline::Destination;
pub(crate) use gpuspan::pipeline::OpenError;
use gpuspan::pipeline::Transport;
use gpuspan::pipeline::{forward_target, ForwardTarget};
use gpuspan::pipeline::{OtlpRequest, SharedRequest};
use gpuspan::pipeline::{Sink, SinkError, Undelivered};

/// A request the collector forwards, and what it counts of it.
pub(crate) trait Forwarded: OtlpRequest + serde::Serialize + Default {
    /// Spans, for a trace request; the request itself, for metrics.
    fn units(&self) -> u64;
}

impl Forwarded for ExportTraceServiceRequest {
    fn units(&self) -> u64 {
        span_count(self)
    }
}

impl Forwarded for ExportMetricsServiceRequest {
    fn units(&self) -> u64 {
        1
    }
}

pub(crate) fn span_count(request: &ExportTraceServiceRequest) -> u64 {
    request
        .resource_spans
        .iter()
        .flat_map(|r| &r.scope_spans)
        .map(|s| s.spans.len() as u64)
        .sum()
}

/// A queued request: shared, so a send in progress encodes it in place while the queue
/// keeps it for a retry.
pub(crate) type Queued<R> = Arc<Held<R>>;

impl<R: Forwarded> SharedRequest for Held<R> {
    type Request = R;
    fn request(&self) -> &R {
        Held::request(self)
    }
}

/// One signal's sink.
#[derive(Debug)]
pub(crate) struct Forward<R> {
    target: Arc<ForwardTarget>,
    /// The first failed send was announced.
    warned: AtomicBool,
    request: PhantomData<fn() -> R>,
}

impl<R: Forwarded> Forward<R> {
    /// The sink for `destination` with its transport; `file` is its name in the run
    /// directory, and a remote target sends on `runtime`.
    pub(crate) fn open(
        destination: &Destination,
        run_dir: Option<&Path>,
        file: &str,
        runtime: &tokio::runtime::Handle,
    ) -> Result<Transport<Self>, OpenError> {
        let target = forward_target(destination, run_dir, file, runtime)?;
        Ok(target.map(|target| Self {
            target,
            warned: AtomicBool::new(false),
            request: PhantomData,
        }))
    }
}

impl<R: Forwarded> Sink for Forward<R> {
    type Item = Queued<R>;

    fn units(item: &Queued<R>) -> u64 {
        item.request().units()
    }

    async fn send(&self, batch: Arc<Vec<Queued<R>>>) -> Result<(), Undelivered> {
        for (delivered, item) in batch.iter().enumerate() {
            let failed = match &*self.target {
                ForwardTarget::Nowhere => continue,
                ForwardTarget::Lines(out) => match out.write(item.request()) {
                    Ok(()) => continue,
                    Err(error) => (SinkError::Write(error), false),
                },
                ForwardTarget::Otlp(client) => match client.send(item).await {
                    Ok(()) => continue,
                    Err(error) => {
                        let retry = error.retryable();
                        (SinkError::Request(error), retry)
                    }
                },
            };
            let (error, retry) = failed;
            if !self.warned.swap(true, Ordering::Relaxed) {
                eprintln!(
                    "gpuspan collect: warning: forwarding failed ({error}); {}",
                    if retry {
                        "retrying, and counting what cannot be sent"
                    } else {
                        "the destination refused it, so it is counted as dropped"
                    }
                );
            }
            return Err(Undelivered {
                delivered,
                retry,
                error,
            });
        }
        Ok(())
    }
}

//! Where the collector sends what it received: the OTLP endpoint the standard variables
//! name (through the request-level OTLP client), the run directory's OTLP/JSON files,
//! standard output, or nowhere. One [`Forward`] per signal is the sink of that signal's
//! export queue, which does the buffering, retries and accounting.
//!
//! Threading: a remote forward sends on the collector's runtime, a local one writes on the
//! export queue's thread.

use std::fs::OpenOptions;
use std::io::Write;
use std::marker::PhantomData;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;

use super::budget::Held;
use crate::config::Destination;
use crate::export::otlp::request::{OtlpRequest, RequestClient, RequestError, SharedRequest};
use crate::export::queue::Transport;
use crate::export::sink::{Sink, SinkError, Undelivered};

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

/// Why a forward target could not be set up.
#[derive(Debug, thiserror::Error)]
pub(crate) enum OpenError {
    #[error("cannot open {path}: {source}")]
    File {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Otlp(#[from] RequestError),
}

/// Where one signal goes.
#[derive(Debug)]
enum Target {
    None,
    Lines(LineFile),
    Otlp(RequestClient),
}

/// One signal's sink.
#[derive(Debug)]
pub(crate) struct Forward<R> {
    target: Target,
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
        let local = |target| {
            Transport::Local(Self {
                target,
                warned: AtomicBool::new(false),
                request: PhantomData,
            })
        };
        Ok(match destination {
            Destination::None => local(Target::None),
            Destination::Console => local(Target::Lines(LineFile::stdout())),
            Destination::RunDir => {
                let path = run_dir.unwrap_or(Path::new(".")).join(file);
                local(Target::Lines(LineFile::append(&path)?))
            }
            Destination::Otlp(target) => {
                let client = RequestClient::new(target, runtime)?;
                let sink = Self {
                    target: Target::Otlp(client),
                    warned: AtomicBool::new(false),
                    request: PhantomData,
                };
                Transport::Remote(Arc::new(sink), runtime.clone())
            }
        })
    }
}

impl<R: Forwarded> Sink for Forward<R> {
    type Item = Queued<R>;

    fn units(item: &Queued<R>) -> u64 {
        item.request().units()
    }

    async fn send(&self, batch: Arc<Vec<Queued<R>>>) -> Result<(), Undelivered> {
        for (delivered, item) in batch.iter().enumerate() {
            let failed = match &self.target {
                Target::None => continue,
                Target::Lines(out) => match out.write(item.request()) {
                    Ok(()) => continue,
                    Err(error) => (SinkError::Write(error), false),
                },
                Target::Otlp(client) => match client.send(item).await {
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

/// An OTLP/JSON lines file, or standard output. Not the SDK's run-directory writer: each
/// line goes out in a single `write`, so lines from another writer of the same file (the
/// collector's own gauges, through the SDK) never interleave with it.
struct LineFile(Mutex<Box<dyn Write + Send>>);

impl std::fmt::Debug for LineFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LineFile")
    }
}

impl LineFile {
    fn append(path: &Path) -> Result<Self, OpenError> {
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|source| OpenError::File {
                path: path.to_path_buf(),
                source,
            })?;
        Ok(Self(Mutex::new(Box::new(file))))
    }

    fn stdout() -> Self {
        Self(Mutex::new(Box::new(std::io::stdout())))
    }

    fn write(&self, value: &impl serde::Serialize) -> std::io::Result<()> {
        let mut line = serde_json::to_vec(value)?;
        line.push(b'\n');
        let mut out = self.0.lock().unwrap_or_else(|p| p.into_inner());
        out.write_all(&line).and_then(|()| out.flush())
    }
}

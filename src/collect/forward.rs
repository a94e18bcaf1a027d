//! Sends what the collector received on: to the OTLP endpoint the standard variables name,
//! or to the run directory's OTLP/JSON files. One worker drains a queue bounded in decoded
//! bytes ([`Budget`]), so a target that is down costs the receiver nothing and the
//! collector's memory stays bounded: a request that does not fit is refused with a status
//! its sender retries (the receiver's concern), failed sends are retried with backoff, then
//! counted as dropped.
//!
//! Threading: the receiver's handlers take room and queue on any runtime thread; the one
//! worker task owns the receiving end and gives the room back when a request is done with.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use std::marker::PhantomData;

use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};

use crate::config::{Destination, OtlpTarget};
use crate::Protocol;

use super::enrich::Enricher;
use super::timeline::Timelines;

/// The forward queue's room, in bytes of decoded requests (see [`super::size`]): a request
/// holds its share from the moment it is accepted until the worker has sent it or given it
/// up, so what waits, and what is being sent, never holds more than the bound.
#[derive(Debug, Clone)]
pub(crate) struct Budget {
    room: Arc<Semaphore>,
    total: usize,
}

impl Budget {
    pub(crate) fn new(total: usize) -> Self {
        let total = total.clamp(1, Semaphore::MAX_PERMITS);
        Self {
            room: Arc::new(Semaphore::new(total)),
            total,
        }
    }

    /// Room for a request of `bytes`, or `None` when the queue is too full for it. A request
    /// larger than the whole bound takes all of it, so it is accepted when the queue is empty.
    pub(crate) fn take(&self, bytes: usize) -> Option<OwnedSemaphorePermit> {
        let share = bytes.min(self.total).min(u32::MAX as usize) as u32;
        Arc::clone(&self.room).try_acquire_many_owned(share).ok()
    }

    /// Bytes free now.
    pub(crate) fn free(&self) -> usize {
        self.room.available_permits()
    }

    /// The bound.
    pub(crate) fn total(&self) -> usize {
        self.total
    }
}

/// Gives the memory of a large request that was just freed back to the system. glibc keeps
/// freed memory in per-thread arenas; requests decoded on one thread and freed on another
/// would otherwise leave the process's resident size well above what it holds. Runs off the
/// runtime's threads, as trimming walks the free lists.
pub(crate) fn give_back_memory(freed: usize) {
    const WORTH_IT: usize = 4 << 20;
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if freed >= WORTH_IT {
        // SAFETY: malloc_trim only returns free memory to the system.
        let trim = || unsafe {
            libc::malloc_trim(0);
        };
        if tokio::runtime::Handle::try_current().is_ok() {
            drop(tokio::task::spawn_blocking(trim));
        } else {
            trim();
        }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    let _ = (freed, WORTH_IT);
}

/// A request in the queue, with the room it holds (none for the collector's own `run`
/// span, which must never be refused).
#[derive(Debug)]
pub(crate) struct Queued {
    pub(crate) item: Item,
    pub(crate) room: Option<OwnedSemaphorePermit>,
}

/// Backoff between attempts to send one request; then it is dropped.
const RETRY_DELAYS: [Duration; 4] = [
    Duration::from_millis(200),
    Duration::from_millis(800),
    Duration::from_secs(2),
    Duration::from_secs(4),
];

/// One received request.
#[derive(Debug)]
pub(crate) enum Item {
    /// Spans to enrich, then send.
    Traces(ExportTraceServiceRequest),
    /// Spans that already carry their memory (the `run` span).
    Ready(ExportTraceServiceRequest),
    Metrics(ExportMetricsServiceRequest),
}

/// Counts of everything the collector took in and let out.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) spans_received: AtomicU64,
    pub(crate) spans_enriched: AtomicU64,
    pub(crate) spans_passed: AtomicU64,
    pub(crate) spans_forwarded: AtomicU64,
    pub(crate) spans_dropped: AtomicU64,
    pub(crate) metric_requests_received: AtomicU64,
    pub(crate) metric_requests_forwarded: AtomicU64,
    pub(crate) metric_requests_dropped: AtomicU64,
    pub(crate) requests_rejected: AtomicU64,
    pub(crate) requests_refused: AtomicU64,
    pub(crate) send_failures: AtomicU64,
}

pub(crate) fn span_count(request: &ExportTraceServiceRequest) -> u64 {
    request
        .resource_spans
        .iter()
        .flat_map(|r| &r.scope_spans)
        .map(|s| s.spans.len() as u64)
        .sum()
}

/// Where one signal goes.
pub(crate) enum Sink {
    None,
    Lines(Mutex<Box<dyn Write + Send>>),
    Grpc {
        channel: tonic::transport::Channel,
        headers: Vec<(String, String)>,
    },
    Http {
        client: reqwest::Client,
        url: String,
        headers: Vec<(String, String)>,
        timeout: Duration,
    },
}

impl std::fmt::Debug for Sink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::None => "none",
            Self::Lines(_) => "lines",
            Self::Grpc { .. } => "grpc",
            Self::Http { .. } => "http",
        })
    }
}

impl Sink {
    /// The sink for `destination`; `file` is its name in the run directory.
    pub(crate) fn open(
        destination: &Destination,
        run_dir: Option<&Path>,
        file: &str,
    ) -> Result<Self, String> {
        Ok(match destination {
            Destination::None => Self::None,
            Destination::Console => Self::Lines(Mutex::new(Box::new(std::io::stdout()))),
            Destination::RunDir => {
                let path = run_dir.unwrap_or(Path::new(".")).join(file);
                let out: File = OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(&path)
                    .map_err(|e| format!("cannot open {}: {e}", path.display()))?;
                Self::Lines(Mutex::new(Box::new(out)))
            }
            Destination::Otlp(target) => Self::otlp(target)?,
        })
    }

    fn otlp(target: &OtlpTarget) -> Result<Self, String> {
        match target.protocol {
            Protocol::Grpc => {
                let endpoint = tonic::transport::Endpoint::from_shared(target.endpoint.clone())
                    .map_err(|e| format!("{} is not a gRPC endpoint URL ({e})", target.endpoint))?
                    .timeout(target.timeout)
                    .connect_timeout(target.timeout);
                Ok(Self::Grpc {
                    channel: endpoint.connect_lazy(),
                    headers: target.headers.clone(),
                })
            }
            _ => Ok(Self::Http {
                client: reqwest::Client::new(),
                url: target.endpoint.clone(),
                headers: target.headers.clone(),
                timeout: target.timeout,
            }),
        }
    }

    async fn send_traces(&self, request: &Arc<ExportTraceServiceRequest>) -> Result<(), String> {
        match self {
            Self::None => Ok(()),
            Self::Lines(out) => write_line(out, &**request),
            Self::Grpc { channel, headers } => {
                export_shared::<_, ExportTraceServiceResponse>(
                    channel,
                    headers,
                    request,
                    "/opentelemetry.proto.collector.trace.v1.TraceService/Export",
                )
                .await
            }
            Self::Http { .. } => self.post(prost::Message::encode_to_vec(&**request)).await,
        }
    }

    async fn send_metrics(&self, request: &Arc<ExportMetricsServiceRequest>) -> Result<(), String> {
        match self {
            Self::None => Ok(()),
            Self::Lines(out) => write_line(out, &**request),
            Self::Grpc { channel, headers } => {
                export_shared::<_, ExportMetricsServiceResponse>(
                    channel,
                    headers,
                    request,
                    "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export",
                )
                .await
            }
            Self::Http { .. } => self.post(prost::Message::encode_to_vec(&**request)).await,
        }
    }

    async fn post(&self, body: Vec<u8>) -> Result<(), String> {
        let Self::Http {
            client,
            url,
            headers,
            timeout,
        } = self
        else {
            return Ok(());
        };
        let mut post = client
            .post(url)
            .timeout(*timeout)
            .header("content-type", "application/x-protobuf")
            .body(body);
        for (k, v) in headers {
            post = post.header(k, v);
        }
        let response = post.send().await.map_err(|e| e.to_string())?;
        if response.status().is_success() {
            Ok(())
        } else {
            Err(format!("{url} answered {}", response.status()))
        }
    }
}

/// One OTLP/gRPC export of a request the worker keeps for its retries, encoded straight from
/// the shared request: tonic's generated clients take the message by value, which would
/// need a copy of the decoded request (about 8 times its protobuf) for every attempt.
async fn export_shared<Req, Reply>(
    channel: &tonic::transport::Channel,
    headers: &[(String, String)],
    request: &Arc<Req>,
    path: &'static str,
) -> Result<(), String>
where
    Req: prost::Message + Send + Sync + 'static,
    Reply: prost::Message + Default + Send + Sync + 'static,
{
    let mut grpc = tonic::client::Grpc::new(channel.clone());
    grpc.ready().await.map_err(|e| e.to_string())?;
    let path = tonic::codegen::http::uri::PathAndQuery::from_static(path);
    grpc.unary::<_, Reply, _>(
        with_headers(Arc::clone(request), headers),
        path,
        SharedCodec::<Req, Reply>(PhantomData),
    )
    .await
    .map(drop)
    .map_err(|s| format!("{}: {}", s.code(), s.message()))
}

/// Encodes a shared request in place; decodes the reply with prost.
struct SharedCodec<Req, Reply>(PhantomData<fn() -> (Req, Reply)>);

impl<Req, Reply> Codec for SharedCodec<Req, Reply>
where
    Req: prost::Message + Send + Sync + 'static,
    Reply: prost::Message + Default + Send + 'static,
{
    type Encode = Arc<Req>;
    type Decode = Reply;
    type Encoder = SharedCodec<Req, ()>;
    type Decoder = SharedCodec<(), Reply>;

    fn encoder(&mut self) -> Self::Encoder {
        SharedCodec(PhantomData)
    }

    fn decoder(&mut self) -> Self::Decoder {
        SharedCodec(PhantomData)
    }
}

impl<Req: prost::Message> Encoder for SharedCodec<Req, ()> {
    type Item = Arc<Req>;
    type Error = tonic::Status;

    fn encode(&mut self, item: Arc<Req>, dst: &mut EncodeBuf<'_>) -> Result<(), tonic::Status> {
        item.encode(dst)
            .map_err(|e| tonic::Status::internal(format!("cannot encode the request: {e}")))
    }
}

impl<Reply: prost::Message + Default> Decoder for SharedCodec<(), Reply> {
    type Item = Reply;
    type Error = tonic::Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Reply>, tonic::Status> {
        Reply::decode(src)
            .map(Some)
            .map_err(|e| tonic::Status::internal(format!("cannot decode the reply: {e}")))
    }
}

fn with_headers<T>(message: T, headers: &[(String, String)]) -> tonic::Request<T> {
    let mut request = tonic::Request::new(message);
    for (k, v) in headers {
        if let (Ok(key), Ok(value)) = (
            tonic::metadata::MetadataKey::from_bytes(k.to_ascii_lowercase().as_bytes()),
            v.parse(),
        ) {
            request.metadata_mut().insert(key, value);
        }
    }
    request
}

/// One OTLP/JSON line, written with a single `write` so lines from other writers of the
/// same file (the collector's own gauges) never interleave with it.
fn write_line(
    out: &Mutex<Box<dyn Write + Send>>,
    value: &impl serde::Serialize,
) -> Result<(), String> {
    let mut line = serde_json::to_vec(value).map_err(|e| e.to_string())?;
    line.push(b'\n');
    let mut out = out.lock().unwrap_or_else(|p| p.into_inner());
    out.write_all(&line)
        .and_then(|()| out.flush())
        .map_err(|e| e.to_string())
}

/// The worker's side: what it needs to enrich and send.
pub(crate) struct Worker {
    pub(crate) traces: Sink,
    pub(crate) metrics: Sink,
    pub(crate) enricher: Enricher,
    pub(crate) timelines: Arc<Timelines>,
    pub(crate) counters: Arc<Counters>,
    /// Set at shutdown once the deadline passed: what is left is counted as dropped.
    pub(crate) give_up: Arc<AtomicBool>,
}

impl Worker {
    /// Handles requests until the queue closes, or until `stopped`; then handles what is
    /// still queued and returns.
    pub(crate) async fn run(
        self,
        mut queue: mpsc::UnboundedReceiver<Queued>,
        mut stopped: tokio::sync::watch::Receiver<bool>,
    ) {
        loop {
            tokio::select! {
                biased;
                queued = queue.recv() => match queued {
                    Some(queued) => self.handle(queued).await,
                    None => return,
                },
                _ = async { let _ = stopped.wait_for(|s| *s).await; } => {
                    while let Ok(queued) = queue.try_recv() {
                        self.handle(queued).await;
                    }
                    return;
                }
            }
        }
    }

    /// Handles one request; its room is given back once it is sent or given up.
    async fn handle(&self, queued: Queued) {
        let Queued { item, room } = queued;
        self.handle_item(item).await;
        let freed = room.map_or(0, |room| room.num_permits());
        give_back_memory(freed);
    }

    async fn handle_item(&self, item: Item) {
        {
            match item {
                Item::Traces(mut request) => {
                    self.catch_up(&request).await;
                    let done = self.enricher.request(&mut request, &self.timelines);
                    let c = &self.counters;
                    c.spans_enriched.fetch_add(done.enriched, Ordering::Relaxed);
                    c.spans_passed.fetch_add(done.passed, Ordering::Relaxed);
                    self.forward_traces(request).await;
                }
                Item::Ready(request) => self.forward_traces(request).await,
                Item::Metrics(request) => {
                    let request = Arc::new(request);
                    let sent = self.retry(|| self.metrics.send_metrics(&request)).await;
                    let counter = if sent {
                        &self.counters.metric_requests_forwarded
                    } else {
                        &self.counters.metric_requests_dropped
                    };
                    counter.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
    }

    async fn forward_traces(&self, request: ExportTraceServiceRequest) {
        let n = span_count(&request);
        let request = Arc::new(request);
        let sent = self.retry(|| self.traces.send_traces(&request)).await;
        let counter = if sent {
            &self.counters.spans_forwarded
        } else {
            &self.counters.spans_dropped
        };
        counter.fetch_add(n, Ordering::Relaxed);
    }

    /// Waits (a few sampling intervals at most) until the timeline has a sample at or after
    /// the latest span end, so a spike just before a span ended is in its peak.
    async fn catch_up(&self, request: &ExportTraceServiceRequest) {
        let end = request
            .resource_spans
            .iter()
            .flat_map(|r| &r.scope_spans)
            .flat_map(|s| &s.spans)
            .map(|s| s.end_time_unix_nano)
            .max()
            .unwrap_or(0);
        let step = self.timelines.interval.max(Duration::from_millis(1));
        for _ in 0..4 {
            if self.timelines.latest().is_some_and(|latest| latest >= end) {
                return;
            }
            tokio::time::sleep(step).await;
        }
    }

    async fn retry<F, Fut>(&self, send: F) -> bool
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Result<(), String>>,
    {
        let mut delays = RETRY_DELAYS.iter();
        loop {
            if self.give_up.load(Ordering::Relaxed) {
                return false;
            }
            match send().await {
                Ok(()) => return true,
                Err(error) => {
                    let failures = self.counters.send_failures.fetch_add(1, Ordering::Relaxed);
                    if failures == 0 {
                        eprintln!(
                            "gpuspan collect: warning: forwarding failed ({error}); retrying, \
                             and counting what cannot be sent"
                        );
                    }
                    match delays.next() {
                        Some(delay) => tokio::time::sleep(*delay).await,
                        None => return false,
                    }
                }
            }
        }
    }
}

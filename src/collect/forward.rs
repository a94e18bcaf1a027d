//! Sends what the collector received on: to the OTLP endpoint the standard variables name,
//! or to the run directory's OTLP/JSON files. One worker drains a bounded queue, so a
//! target that is down costs the receiver nothing: requests that do not fit are dropped and
//! counted, failed sends are retried with backoff, then counted as dropped.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_client::MetricsServiceClient;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use tokio::sync::mpsc;

use crate::config::{Destination, OtlpTarget};
use crate::Protocol;

use super::enrich::Enricher;
use super::timeline::Timelines;

/// Requests waiting to be forwarded, at most.
pub(crate) const QUEUE_REQUESTS: usize = 1024;

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

    async fn send_traces(&self, request: &ExportTraceServiceRequest) -> Result<(), String> {
        match self {
            Self::None => Ok(()),
            Self::Lines(out) => write_line(out, request),
            Self::Grpc {
                channel, headers, ..
            } => {
                let mut client = TraceServiceClient::new(channel.clone());
                client
                    .export(with_headers(request.clone(), headers))
                    .await
                    .map(drop)
                    .map_err(|s| format!("{}: {}", s.code(), s.message()))
            }
            Self::Http { .. } => self.post(prost::Message::encode_to_vec(request)).await,
        }
    }

    async fn send_metrics(&self, request: &ExportMetricsServiceRequest) -> Result<(), String> {
        match self {
            Self::None => Ok(()),
            Self::Lines(out) => write_line(out, request),
            Self::Grpc {
                channel, headers, ..
            } => {
                let mut client = MetricsServiceClient::new(channel.clone());
                client
                    .export(with_headers(request.clone(), headers))
                    .await
                    .map(drop)
                    .map_err(|s| format!("{}: {}", s.code(), s.message()))
            }
            Self::Http { .. } => self.post(prost::Message::encode_to_vec(request)).await,
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
        mut queue: mpsc::Receiver<Item>,
        mut stopped: tokio::sync::watch::Receiver<bool>,
    ) {
        loop {
            tokio::select! {
                biased;
                item = queue.recv() => match item {
                    Some(item) => self.handle(item).await,
                    None => return,
                },
                _ = async { let _ = stopped.wait_for(|s| *s).await; } => {
                    while let Ok(item) = queue.try_recv() {
                        self.handle(item).await;
                    }
                    return;
                }
            }
        }
    }

    async fn handle(&self, item: Item) {
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

//! The collector's way out: one export queue per signal (the same queue, backoff and
//! accounting as the SDK's spans), with the enrichment as the trace queue's accept step,
//! and the collector's counts read from the queues' accounting.
//!
//! Threading: the receiver's handlers push on any runtime thread and never wait; each
//! queue's thread enriches (traces) and sends; a remote send runs on the collector's
//! runtime. Shutdown blocks: call it where blocking is allowed.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::budget::{Held, Room};
use super::enrich::Enricher;
use super::forward::{span_count, Forward, Forwarded, OpenError, Queued};
use super::timeline::Timelines;
use super::CollectStats;
use gpuspan::pipeline::ExportHealth;
use gpuspan::pipeline::{Accept, Queue, QueueConfig, Transport};
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;

/// What the collector counts besides the queues' own accounting.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) spans_enriched: AtomicU64,
    pub(crate) spans_passed: AtomicU64,
    pub(crate) requests_rejected: AtomicU64,
    pub(crate) requests_refused: AtomicU64,
    /// Spans the collector made itself (the `run` span): forwarded, not received.
    own_spans: AtomicU64,
}

/// A trace request on its way into the queue.
#[derive(Debug)]
pub(crate) struct Received {
    held: Held<ExportTraceServiceRequest>,
    /// Spans from a sender get memory figures; the collector's own already carry theirs.
    enrich: bool,
}

/// The trace queue's accept step: memory figures on every received span.
struct Enrichment {
    enricher: Enricher,
    timelines: Arc<Timelines>,
    counters: Arc<Counters>,
}

impl Accept for Enrichment {
    type Input = Received;
    type Extra = ();
    type Item = Queued<ExportTraceServiceRequest>;

    fn accept(&mut self, received: Received, (): ()) -> Self::Item {
        let Received { mut held, enrich } = received;
        if enrich {
            self.catch_up(held.request());
            let done = self.enricher.request(held.request_mut(), &self.timelines);
            let c = &self.counters;
            c.spans_enriched.fetch_add(done.enriched, Ordering::Relaxed);
            c.spans_passed.fetch_add(done.passed, Ordering::Relaxed);
            // Its room was taken for every figure it may get: keep what it holds.
            let holds = super::size::traces(held.request());
            held.settle(holds);
        }
        Arc::new(held)
    }

    fn units(received: &Received) -> u64 {
        span_count(received.held.request())
    }
}

impl Enrichment {
    /// Waits (a few sampling intervals at most) until the timeline has a sample at or after
    /// the latest span end, so a spike just before a span ended is in its peak.
    fn catch_up(&self, request: &ExportTraceServiceRequest) {
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
            std::thread::sleep(step);
        }
    }
}

/// Metric requests pass as they came.
struct Pass;

impl Accept for Pass {
    type Input = Held<ExportMetricsServiceRequest>;
    type Extra = ();
    type Item = Queued<ExportMetricsServiceRequest>;

    fn accept(&mut self, held: Self::Input, (): ()) -> Self::Item {
        Arc::new(held)
    }

    fn units(held: &Self::Input) -> u64 {
        held.request().units()
    }
}

/// The queue of forwarded requests: bounded in bytes by the receiver's admission rule
/// ([`super::budget`]), never in count; one request per send, so a failure holds back
/// only the requests behind it.
fn config() -> QueueConfig {
    QueueConfig {
        capacity: usize::MAX / 2,
        batch: 1,
        ..QueueConfig::default()
    }
}

/// Both signals' sinks, opened.
pub(crate) struct Sinks {
    pub(crate) traces: Transport<Forward<ExportTraceServiceRequest>>,
    pub(crate) metrics: Transport<Forward<ExportMetricsServiceRequest>>,
}

/// A signal whose forward target could not be set up.
#[derive(Debug)]
pub(crate) struct SinkFailed {
    pub(crate) signal: &'static str,
    pub(crate) error: OpenError,
}

/// The two queues and the counts.
#[derive(Debug)]
pub(crate) struct Forwarding {
    traces: Queue<Received>,
    metrics: Queue<Held<ExportMetricsServiceRequest>>,
    traces_health: Arc<ExportHealth>,
    metrics_health: Arc<ExportHealth>,
    pub(crate) counters: Arc<Counters>,
    /// What enrichment may add to a received trace request, see [`Self::enrichment`].
    enricher: Enricher,
    timelines: Arc<Timelines>,
    most_per_span: usize,
}

impl Forwarding {
    /// Starts both queues' threads; `[traces, metrics]` name the destinations in warnings.
    pub(crate) fn start(
        sinks: Sinks,
        enricher: Enricher,
        timelines: Arc<Timelines>,
        [traces, metrics]: [&str; 2],
    ) -> std::io::Result<Self> {
        let counters = Arc::new(Counters::default());
        let traces_health = Arc::new(ExportHealth::new(traces.to_owned(), "span"));
        let metrics_health = Arc::new(ExportHealth::new(metrics.to_owned(), "metric request"));
        let most_per_span = enricher.most_per_span();
        let enrichment = Enrichment {
            enricher: enricher.clone(),
            timelines: Arc::clone(&timelines),
            counters: Arc::clone(&counters),
        };
        let traces = Queue::start(
            "gpuspan-forward-traces",
            sinks.traces,
            enrichment,
            config(),
            Arc::clone(&traces_health),
        )?;
        let metrics = Queue::start(
            "gpuspan-forward-metrics",
            sinks.metrics,
            Pass,
            config(),
            Arc::clone(&metrics_health),
        )?;
        Ok(Self {
            traces,
            metrics,
            traces_health,
            metrics_health,
            counters,
            enricher,
            timelines,
            most_per_span,
        })
    }

    /// The most bytes the memory figures may add to `request`'s spans: room the queue
    /// holds for them from the moment it takes the request in.
    pub(crate) fn enrichment(&self, request: &ExportTraceServiceRequest) -> usize {
        if self.most_per_span == 0 {
            return 0;
        }
        let spans = request
            .resource_spans
            .iter()
            .flat_map(|r| &r.scope_spans)
            .flat_map(|s| &s.spans)
            .filter(|span| self.enricher.may_enrich(span, &self.timelines))
            .count();
        spans.saturating_mul(self.most_per_span)
    }

    /// Queues a received trace request holding `room`, to be enriched and forwarded.
    pub(crate) fn traces(&self, request: ExportTraceServiceRequest, room: Room) {
        let spans = span_count(&request);
        let held = Held::new(request, Some(room));
        self.traces.push(Received { held, enrich: true }, (), spans);
    }

    /// Queues spans the collector made itself, with their memory already on them.
    pub(crate) fn own_spans(&self, request: ExportTraceServiceRequest) {
        let spans = span_count(&request);
        self.counters.own_spans.fetch_add(spans, Ordering::Relaxed);
        let held = Held::new(request, None);
        self.traces.push(
            Received {
                held,
                enrich: false,
            },
            (),
            spans,
        );
    }

    /// Queues a received metrics request holding `room`.
    pub(crate) fn metrics(&self, request: ExportMetricsServiceRequest, room: Room) {
        self.metrics.push(Held::new(request, Some(room)), (), 1);
    }

    /// Forwards what is queued, for up to `drain` (both signals at once); what is left is
    /// counted as dropped.
    pub(crate) fn shutdown(&self, drain: Duration) {
        let both = std::thread::scope(|scope| {
            let metrics = std::thread::Builder::new()
                .name("gpuspan-collect-drain".into())
                .spawn_scoped(scope, || self.metrics.shutdown(drain))?;
            let _ = self.traces.shutdown(drain);
            let _ = metrics.join();
            Ok::<_, std::io::Error>(())
        });
        if both.is_err() {
            // No thread for the second drain: one after the other.
            let _ = self.traces.shutdown(drain);
            let _ = self.metrics.shutdown(drain);
        }
    }

    /// Stops both queues without waiting (no thread could be started to wait from).
    pub(crate) fn close(&self) {
        self.traces.close(Duration::ZERO);
        self.metrics.close(Duration::ZERO);
    }

    /// The counts so far, in the collector's terms.
    pub(crate) fn stats(&self) -> CollectStats {
        let c = &self.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let spans = self.traces_health.counts();
        let metrics = self.metrics_health.counts();
        CollectStats {
            spans_received: spans.produced.saturating_sub(get(&c.own_spans)),
            spans_enriched: get(&c.spans_enriched),
            spans_passed: get(&c.spans_passed),
            spans_forwarded: spans.delivered,
            spans_dropped: spans.lost,
            metric_requests_received: metrics.produced,
            metric_requests_forwarded: metrics.delivered,
            metric_requests_dropped: metrics.lost,
            requests_rejected: get(&c.requests_rejected),
            requests_refused: get(&c.requests_refused),
        }
    }
}

impl Sinks {
    /// Opens both signals' sinks: a remote one sends on `runtime`.
    pub(crate) fn open(
        settings: &gpuspan::pipeline::Settings,
        run_dir: Option<&std::path::Path>,
        runtime: &tokio::runtime::Handle,
    ) -> Result<Self, SinkFailed> {
        let traces = Forward::open(
            &settings.traces,
            run_dir,
            gpuspan::runlog::TRACES_FILE,
            runtime,
        )
        .map_err(|error| SinkFailed {
            signal: "traces",
            error,
        })?;
        let metrics = Forward::open(
            &settings.metrics,
            run_dir,
            gpuspan::runlog::METRICS_FILE,
            runtime,
        )
        .map_err(|error| SinkFailed {
            signal: "metrics",
            error,
        })?;
        Ok(Self { traces, metrics })
    }
}

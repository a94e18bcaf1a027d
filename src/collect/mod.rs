//! `gpuspan collect` and `gpuspan run`: GPU memory on the spans of programs that are not
//! built with gpuspan.
//!
//! A [`Collector`] samples every device (and every process's GPU memory) into a range-max
//! timeline, receives OTLP over gRPC and HTTP, puts `gpu.memory.*` and
//! `gpu.process.memory.*` on each span by its own start and end time, and forwards spans
//! and metrics to where the standard `OTEL_EXPORTER_OTLP_*` variables point, or to the run
//! directory. [`run`] starts one on free local ports around a command.
//!
//! Requests wait for the forward target in a queue bounded in bytes of decoded requests
//! ([`DEFAULT_MAX_QUEUE_BYTES`], [`CollectorBuilder::max_queue_bytes`]). A decoded request
//! is several times its protobuf size, so each is measured as decoded (every vector's and
//! string's capacity). A request that does not fit is refused with HTTP 503 and
//! `Retry-After`, or gRPC `UNAVAILABLE`, which OTLP exporters retry; it is counted in
//! [`CollectStats::requests_refused`].
//!
//! A [`Collector`] runs on its own runtime. It can be started, shut down and dropped from
//! async code: what blocks then runs on a thread of its own.

mod decode;
mod enrich;
mod forward;
mod run;
mod server;
mod size;
mod timeline;
mod tree;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use tokio::sync::{mpsc, watch};

pub use run::{run, RunOutcome};

use crate::config::{self, CodeSettings};
use crate::source::processes::ProcessTable;
use crate::timeline::{Tick, TickObserver};
use forward::{Budget, Counters, Item, Queued, Sink, Worker};
use timeline::{Recorder, Timelines};

/// The default gRPC address: the OTLP port, on loopback.
pub const DEFAULT_GRPC_ADDR: &str = "127.0.0.1:4317";
/// The default HTTP address.
pub const DEFAULT_HTTP_ADDR: &str = "127.0.0.1:4318";
/// The default largest request body, compressed or decompressed.
pub const DEFAULT_MAX_REQUEST_BYTES: usize = 16 << 20;
/// The default bound of the forward queue, in bytes of decoded requests (256 MiB): what
/// waits for the forward target and what is being sent. A 16 MiB request of small spans is
/// 100 to 140 MiB once decoded; an SDK's batch of 512 spans is well under 1 MiB.
pub const DEFAULT_MAX_QUEUE_BYTES: usize = 256 << 20;

/// Why the collector could not start or stop cleanly.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CollectError {
    /// The telemetry setup failed (a setting, the run directory, an exporter).
    #[error(transparent)]
    Init(#[from] crate::InitError),
    /// A listening address could not be bound.
    #[error(
        "cannot listen on {addr}: {source} (choose another address or port, or stop what uses it)"
    )]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A forward target could not be set up.
    #[error("cannot forward {signal}: {reason}")]
    Forward {
        /// `traces` or `metrics`.
        signal: &'static str,
        /// What was wrong.
        reason: String,
    },
    /// `gpuspan run` was given no command.
    #[error("no command given: use gpuspan run -- <command> [args]")]
    NoCommand,
    /// The command could not be started.
    #[error("cannot start {program}: {source} (is it installed and on PATH?)")]
    Command {
        /// The program.
        program: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A thread or runtime could not be started.
    #[error("cannot start the collector's runtime: {0}")]
    Runtime(#[source] std::io::Error),
}

/// Counts of what a collector received, enriched, forwarded and turned away.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CollectStats {
    /// Spans received.
    pub spans_received: u64,
    /// Spans given memory figures.
    pub spans_enriched: u64,
    /// Spans that already carried `gpu.memory.*` and passed unchanged.
    pub spans_passed: u64,
    /// Spans delivered to the forward target.
    pub spans_forwarded: u64,
    /// Spans dropped: the target kept failing, or the collector stopped before they could
    /// be sent. Once stopped, `spans_received == spans_forwarded + spans_dropped`.
    pub spans_dropped: u64,
    /// Metric export requests received.
    pub metric_requests_received: u64,
    /// Metric export requests delivered.
    pub metric_requests_forwarded: u64,
    /// Metric export requests dropped.
    pub metric_requests_dropped: u64,
    /// Requests answered with an error (malformed, too large, wrong content type).
    pub requests_rejected: u64,
    /// Requests refused because the forward queue was full (HTTP 503 with `Retry-After`,
    /// gRPC `UNAVAILABLE`). Their senders keep and resend them, so their spans are not
    /// counted as received.
    pub requests_refused: u64,
}

/// Sets up a [`Collector`].
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until `start()`"]
pub struct CollectorBuilder {
    grpc: Option<SocketAddr>,
    http: Option<SocketAddr>,
    max_request_bytes: usize,
    max_queue_bytes: usize,
    service_name: String,
    code: CodeSettings,
}

impl Default for CollectorBuilder {
    fn default() -> Self {
        Self {
            grpc: DEFAULT_GRPC_ADDR.parse().ok(),
            http: DEFAULT_HTTP_ADDR.parse().ok(),
            max_request_bytes: DEFAULT_MAX_REQUEST_BYTES,
            max_queue_bytes: DEFAULT_MAX_QUEUE_BYTES,
            service_name: "gpuspan-collect".into(),
            code: CodeSettings::default(),
        }
    }
}

impl CollectorBuilder {
    /// Where to receive OTLP/gRPC (`None`: not at all). Port 0 picks a free port.
    pub fn grpc_addr(mut self, addr: Option<SocketAddr>) -> Self {
        self.grpc = addr;
        self
    }

    /// Where to receive OTLP/HTTP (`None`: not at all). Both ports answer both protocols.
    pub fn http_addr(mut self, addr: Option<SocketAddr>) -> Self {
        self.http = addr;
        self
    }

    /// The largest request accepted, compressed and once decompressed.
    pub fn max_request_bytes(mut self, bytes: usize) -> Self {
        self.max_request_bytes = bytes.max(1024);
        self
    }

    /// The bound of the forward queue, in bytes of decoded requests (default
    /// [`DEFAULT_MAX_QUEUE_BYTES`]). A request larger than the bound is accepted only into
    /// an empty queue.
    pub fn max_queue_bytes(mut self, bytes: usize) -> Self {
        self.max_queue_bytes = bytes.max(1);
        self
    }

    /// `service.name` of the collector's own gauges.
    pub fn service_name(mut self, name: impl Into<String>) -> Self {
        self.service_name = name.into();
        self
    }

    /// Where to forward (else `OTEL_EXPORTER_OTLP_ENDPOINT`, else the run directory).
    pub fn endpoint(mut self, url: impl Into<String>) -> Self {
        self.code.endpoint = Some(url.into());
        self
    }

    /// How to forward (else `OTEL_EXPORTER_OTLP_PROTOCOL`, else gRPC).
    pub fn protocol(mut self, protocol: crate::Protocol) -> Self {
        self.code.protocol = Some(protocol);
        self
    }

    /// The directory of runs (else `GPUSPAN_RUN_DIR`, else `gpuspan-runs`).
    pub fn run_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.code.run_dir = Some(dir.into());
        self
    }

    /// The NVML library (else `GPUSPAN_NVML_LIB`, else the system's).
    pub fn nvml_lib(mut self, path: impl Into<PathBuf>) -> Self {
        self.code.nvml_lib = Some(path.into());
        self
    }

    /// The sampling interval (else `GPUSPAN_SAMPLE_INTERVAL`, else 5 ms).
    pub fn sample_interval(mut self, interval: Duration) -> Self {
        self.code.sample_interval = Some(interval);
        self
    }

    /// Starts sampling, listening and forwarding. Works from async code too.
    ///
    /// # Errors
    /// A setting that does not parse, an address in use, a forward target that cannot be
    /// set up; see [`CollectError`].
    pub fn start(self) -> Result<Collector, CollectError> {
        Collector::start(self)
    }
}

/// Receives spans over OTLP, puts GPU memory on them, and forwards them.
#[derive(Debug)]
#[must_use = "dropping a Collector stops it"]
pub struct Collector {
    telemetry: Option<crate::Telemetry>,
    timelines: Arc<Timelines>,
    counters: Arc<Counters>,
    runtime: Option<tokio::runtime::Runtime>,
    queue: Option<mpsc::UnboundedSender<Queued>>,
    worker: Option<tokio::task::JoinHandle<()>>,
    servers: Vec<tokio::task::JoinHandle<()>>,
    stop: watch::Sender<bool>,
    worker_stop: watch::Sender<bool>,
    give_up: Arc<AtomicBool>,
    grpc_addr: Option<SocketAddr>,
    http_addr: Option<SocketAddr>,
    run_dir: Option<PathBuf>,
    forward_to: String,
}

/// Feeds the timelines once they exist (they need the device list, known only after the
/// telemetry picked its source).
struct LateRecorder {
    cell: Arc<OnceLock<Arc<Timelines>>>,
    processes: Option<ProcessTable>,
    inner: Option<Recorder>,
}

impl TickObserver for LateRecorder {
    fn on_tick(&mut self, tick: &Tick<'_>) {
        if self.inner.is_none() {
            if let Some(timelines) = self.cell.get() {
                self.inner = Some(Recorder {
                    timelines: Arc::clone(timelines),
                    processes: self.processes.take(),
                    ticks: 0,
                });
            }
        }
        if let Some(recorder) = &mut self.inner {
            recorder.on_tick(tick);
        }
    }
}

impl Collector {
    /// A builder with the defaults: gRPC on 127.0.0.1:4317, HTTP on 127.0.0.1:4318.
    pub fn builder() -> CollectorBuilder {
        CollectorBuilder::default()
    }

    fn start(options: CollectorBuilder) -> Result<Self, CollectError> {
        off_runtime(|| Self::start_here(options)).unwrap_or_else(|e| Err(CollectError::Runtime(e)))
    }

    fn start_here(options: CollectorBuilder) -> Result<Self, CollectError> {
        let settings = config::resolve(&options.code)?;
        let cell = Arc::new(OnceLock::new());
        let mut builder = crate::Telemetry::builder()
            .service_name(options.service_name.clone())
            .run_id(settings.run_id.clone())
            .run_dir(settings.run_root.clone())
            .sample_interval(settings.sample_interval)
            .traces_exporter(crate::Exporter::None)
            .summary(false)
            .flush_on_signal(false);
        if let Some(endpoint) = &options.code.endpoint {
            builder = builder.endpoint(endpoint.clone());
        }
        if let Some(protocol) = options.code.protocol {
            builder = builder.protocol(protocol);
        }
        if let Some(lib) = &settings.nvml_lib {
            builder = builder.nvml_lib(lib.clone());
        }
        let mut processes = None;
        #[cfg(feature = "nvml")]
        if let Ok(source) =
            crate::source::nvml::NvmlSource::open(settings.nvml_lib.as_deref(), &settings.devices)
        {
            let table = ProcessTable::default();
            processes = Some(Arc::clone(&table));
            builder = builder.memory_source(source.with_process_table(table));
        }
        builder = builder.tick_observer(Box::new(LateRecorder {
            cell: Arc::clone(&cell),
            processes,
            inner: None,
        }));
        let telemetry = builder.build()?;
        let interval = telemetry
            .sampler_stats()
            .map_or(settings.sample_interval, |s| s.interval);
        let devices = telemetry.devices();
        let indexes = devices.iter().map(|d| d.device.index).collect();
        let timelines = Arc::new(Timelines::new(indexes, interval));
        let _ = cell.set(Arc::clone(&timelines));
        let source = telemetry.memory_source().unwrap_or("none").to_owned();
        let run_dir = telemetry.run_dir().map(Path::to_path_buf);
        let traces_run_dir = match (&settings.traces, &run_dir) {
            (config::Destination::RunDir, None) => {
                let dir = settings.run_dir();
                std::fs::create_dir_all(&dir).map_err(|source| {
                    CollectError::Init(crate::InitError::RunDir {
                        path: dir.clone(),
                        source,
                    })
                })?;
                Some(dir)
            }
            (_, dir) => dir.clone(),
        };
        let forward_to = describe(&settings.traces, traces_run_dir.as_deref());

        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("gpuspan-collect")
            .enable_all()
            .build()
            .map_err(CollectError::Runtime)?;
        let counters = Arc::new(Counters::default());
        let give_up = Arc::new(AtomicBool::new(false));
        // Unbounded in count: the bound is the budget's, in decoded bytes.
        let (queue, receiver) = mpsc::unbounded_channel();
        let (traces, metrics) = {
            let _guard = runtime.enter();
            let traces = Sink::open(
                &settings.traces,
                traces_run_dir.as_deref(),
                crate::runlog::TRACES_FILE,
            )
            .map_err(|reason| CollectError::Forward {
                signal: "traces",
                reason,
            })?;
            let metrics = Sink::open(
                &settings.metrics,
                traces_run_dir.as_deref(),
                crate::runlog::METRICS_FILE,
            )
            .map_err(|reason| CollectError::Forward {
                signal: "metrics",
                reason,
            })?;
            (traces, metrics)
        };
        let worker = Worker {
            traces,
            metrics,
            enricher: enrich::Enricher::new(&source, &timelines.device_indexes),
            timelines: Arc::clone(&timelines),
            counters: Arc::clone(&counters),
            give_up: Arc::clone(&give_up),
        };
        let (worker_stop, _) = watch::channel(false);
        let worker = runtime.spawn(worker.run(receiver, worker_stop.subscribe()));
        let (stop, _) = watch::channel(false);
        let intake = server::Intake {
            queue: queue.clone(),
            budget: Budget::new(options.max_queue_bytes),
            counters: Arc::clone(&counters),
            limit: options.max_request_bytes,
        };
        let router = server::router(intake);
        let mut servers = Vec::new();
        let mut bound = [None, None];
        for (slot, addr) in [options.grpc, options.http].into_iter().enumerate() {
            let Some(addr) = addr else { continue };
            let mut stopped = stop.subscribe();
            let signal = async move {
                let _ = stopped.wait_for(|s| *s).await;
            };
            let (local, task) = runtime
                .block_on(server::serve(addr, router.clone(), signal))
                .map_err(|source| CollectError::Bind { addr, source })?;
            bound[slot] = Some(local);
            servers.push(task);
        }
        // The first reading reaches the timeline at the next tick: wait for it, so a span
        // that starts now has a start figure.
        let deadline = Instant::now() + Duration::from_secs(2);
        while timelines.latest().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        Ok(Self {
            telemetry: Some(telemetry),
            timelines,
            counters,
            runtime: Some(runtime),
            queue: Some(queue),
            worker: Some(worker),
            servers,
            stop,
            worker_stop,
            give_up,
            grpc_addr: bound[0],
            http_addr: bound[1],
            run_dir: traces_run_dir,
            forward_to,
        })
    }

    /// Where OTLP/gRPC is received.
    pub fn grpc_addr(&self) -> Option<SocketAddr> {
        self.grpc_addr
    }

    /// Where OTLP/HTTP is received.
    pub fn http_addr(&self) -> Option<SocketAddr> {
        self.http_addr
    }

    /// The run directory written to, when spans or metrics go there.
    pub fn run_dir(&self) -> Option<&Path> {
        self.run_dir.as_deref()
    }

    /// Where spans are forwarded, in words.
    pub fn forward_to(&self) -> &str {
        &self.forward_to
    }

    /// Bytes the memory timelines hold.
    pub fn timeline_bytes(&self) -> usize {
        self.timelines.heap_bytes()
    }

    /// Counts so far.
    pub fn stats(&self) -> CollectStats {
        let c = &self.counters;
        let get = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
        CollectStats {
            spans_received: get(&c.spans_received),
            spans_enriched: get(&c.spans_enriched),
            spans_passed: get(&c.spans_passed),
            spans_forwarded: get(&c.spans_forwarded),
            spans_dropped: get(&c.spans_dropped),
            metric_requests_received: get(&c.metric_requests_received),
            metric_requests_forwarded: get(&c.metric_requests_forwarded),
            metric_requests_dropped: get(&c.metric_requests_dropped),
            requests_rejected: get(&c.requests_rejected),
            requests_refused: get(&c.requests_refused),
        }
    }

    pub(crate) fn timelines(&self) -> &Arc<Timelines> {
        &self.timelines
    }

    pub(crate) fn enricher(&self) -> enrich::Enricher {
        let source = self
            .telemetry
            .as_ref()
            .and_then(|t| t.memory_source())
            .unwrap_or("none");
        enrich::Enricher::new(source, &self.timelines.device_indexes)
    }

    pub(crate) fn queue_ready(
        &self,
        request: opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest,
    ) {
        if let Some(queue) = &self.queue {
            let spans = forward::span_count(&request);
            let queued = Queued {
                item: Item::Ready(request),
                room: None,
            };
            if queue.send(queued).is_err() {
                self.counters
                    .spans_dropped
                    .fetch_add(spans, Ordering::Relaxed);
            }
        }
    }

    /// Stops receiving, forwards what is queued (for up to `drain`; what is left is counted
    /// as dropped), then stops sampling and flushes the collector's own gauges (a failure
    /// there is printed as a warning, like the SDK's own losses). Works from async code too.
    pub fn shutdown(mut self, drain: Duration) -> CollectStats {
        let stopped = off_runtime(|| {
            self.stop_all(drain);
            if let Some(telemetry) = self.telemetry.take() {
                if let Err(e) = telemetry.shutdown() {
                    eprintln!("gpuspan collect: warning: the collector's own gauges: {e}");
                }
            }
        });
        if let Err(e) = stopped {
            self.stop_without_thread(&e);
        }
        self.stats()
    }

    /// The last resort when no thread could be started to stop from async code: stops
    /// without waiting, and says so.
    fn stop_without_thread(&mut self, error: &std::io::Error) {
        eprintln!(
            "gpuspan collect: warning: cannot start a thread to stop the collector ({error}); \
             what is still queued is not forwarded"
        );
        let _ = self.stop.send(true);
        let _ = self.worker_stop.send(true);
        self.give_up.store(true, Ordering::Relaxed);
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }

    /// Blocks until the servers and the worker are done: call it where blocking is allowed
    /// ([`off_runtime`]).
    fn stop_all(&mut self, drain: Duration) {
        let _ = self.stop.send(true);
        let Some(runtime) = self.runtime.take() else {
            return;
        };
        for server in self.servers.drain(..) {
            let _ = runtime
                .block_on(async { tokio::time::timeout(Duration::from_secs(2), server).await });
        }
        self.queue = None;
        let _ = self.worker_stop.send(true);
        if let Some(worker) = self.worker.take() {
            let give_up = Arc::clone(&self.give_up);
            runtime.block_on(async move {
                let mut worker = worker;
                if tokio::time::timeout(drain, &mut worker).await.is_err() {
                    give_up.store(true, Ordering::Relaxed);
                    let _ = worker.await;
                }
            });
        }
        runtime.shutdown_timeout(Duration::from_secs(1));
    }
}

impl Drop for Collector {
    fn drop(&mut self) {
        if self.runtime.is_none() && self.telemetry.is_none() {
            return;
        }
        let stopped = off_runtime(|| {
            self.stop_all(Duration::from_secs(5));
            drop(self.telemetry.take());
        });
        if let Err(e) = stopped {
            self.stop_without_thread(&e);
        }
    }
}

/// Runs `f` where blocking is allowed: on this thread, or, when this thread drives an async
/// runtime (a collector started or dropped in async code, where `block_on` and dropping a
/// runtime would panic), on a thread of its own.
fn off_runtime<T: Send>(f: impl FnOnce() -> T + Send) -> std::io::Result<T> {
    if tokio::runtime::Handle::try_current().is_err() {
        return Ok(f());
    }
    std::thread::scope(|scope| {
        let thread = std::thread::Builder::new()
            .name("gpuspan-collect-block".into())
            .spawn_scoped(scope, f)?;
        Ok(thread
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic)))
    })
}

fn describe(destination: &config::Destination, run_dir: Option<&Path>) -> String {
    match destination {
        config::Destination::Otlp(target) => target.endpoint.clone(),
        config::Destination::RunDir => {
            run_dir.map_or("the run directory".into(), |d| d.display().to_string())
        }
        config::Destination::Console => "standard output".into(),
        config::Destination::None => "nowhere (OTEL_TRACES_EXPORTER=none)".into(),
    }
}

/// The collector's timeline and enrichment without the servers, for the benchmarks.
#[doc(hidden)]
pub mod __bench {
    use std::sync::Arc;
    use std::time::Duration;

    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;

    use super::enrich::{Enriched, Enricher};
    use super::timeline::Timelines;
    use crate::timeline::Tick;

    /// Bytes a decoded trace request holds, as the forward queue counts it.
    pub fn queued_bytes(request: &ExportTraceServiceRequest) -> usize {
        super::size::traces(request)
    }

    /// A device timeline as the collector keeps it.
    #[derive(Debug)]
    pub struct Timeline {
        timelines: Arc<Timelines>,
        enricher: Enricher,
    }

    impl Timeline {
        /// `devices` devices sampled every `interval`.
        pub fn new(devices: u32, interval: Duration) -> Self {
            let indexes: Vec<u32> = (0..devices).collect();
            Self {
                enricher: Enricher::new("nvml", &indexes),
                timelines: Arc::new(Timelines::new(indexes, interval)),
            }
        }

        /// One tick: memory used per device at `unix_nanos`.
        pub fn push(&self, unix_nanos: u64, used: &[Option<u64>]) {
            let tick = Tick {
                unix_nanos,
                devices: used,
                totals: &[],
                process_gpu: None,
                host_rss: None,
                allocated: None,
                reserved: None,
            };
            self.timelines.record(&tick, None, 0);
        }

        /// The peak of the devices' sum over a window.
        pub fn peak(&self, start: u64, end: u64) -> Option<u64> {
            let n = self.timelines.device_indexes.len();
            self.timelines.devices_window(start, end)?.peak[n]
        }

        /// Bytes held.
        pub fn heap_bytes(&self) -> usize {
            self.timelines.heap_bytes()
        }

        /// Enriches every span of `request`; returns how many got figures.
        pub fn enrich(&self, request: &mut ExportTraceServiceRequest) -> u64 {
            let done: Enriched = self.enricher.request(request, &self.timelines);
            done.enriched
        }
    }
}

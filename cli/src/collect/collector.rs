//! A running collector: the sampler's timelines, the receiver's servers and the forward
//! queues, on a runtime of its own, and how they stop.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use tokio::sync::watch;

use super::budget::Budget;
use super::builder::CollectorBuilder;
use super::enrich::Enricher;
use super::pipeline::{Forwarding, Sinks};
use super::server;
use super::timeline::{Recorder, Timelines};
use super::{CollectError, CollectStats};
use gpuspan::pipeline::ProcessTable;
use gpuspan::pipeline::{self as config, Destination};
use gpuspan::pipeline::{Tick, TickObserver};

/// Receives spans over OTLP, puts GPU memory on them, and forwards them.
#[derive(Debug)]
#[must_use = "dropping a Collector stops it"]
pub struct Collector {
    telemetry: Option<gpuspan::Telemetry>,
    timelines: Arc<Timelines>,
    forwarding: Arc<Forwarding>,
    runtime: Option<tokio::runtime::Runtime>,
    servers: Vec<tokio::task::JoinHandle<()>>,
    stop: watch::Sender<bool>,
    grpc_addr: Option<SocketAddr>,
    http_addr: Option<SocketAddr>,
    run_dir: Option<PathBuf>,
    run_id: String,
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

    pub(super) fn start(options: CollectorBuilder) -> Result<Self, CollectError> {
        off_runtime(|| Self::start_here(options)).unwrap_or_else(|e| Err(CollectError::Runtime(e)))
    }

    fn start_here(mut options: CollectorBuilder) -> Result<Self, CollectError> {
        // The collector measures the node, even when started in a rank's environment.
        options.code.whole_node = true;
        let settings = config::resolve(&options.code)?;
        let cell = Arc::new(OnceLock::new());
        // The collector's own gauges, from the settings resolved above: the spans it
        // receives are forwarded, not its own.
        let own = settings.for_collectors_own(options.service_name.clone());
        let mut builder = gpuspan::Telemetry::builder();
        let mut processes = None;
        let table = ProcessTable::default();
        // NVIDIA's GPUs through NVML and AMD's and Intel's from the kernel's files, each
        // device once, with every process's memory NVML lists.
        if let Some(source) = config::gpu_source(&settings, Arc::clone(&table))? {
            processes = Some(table);
            builder = builder.memory_source(source);
        }
        builder = builder.tick_observer(Box::new(LateRecorder {
            cell: Arc::clone(&cell),
            processes,
            inner: None,
        }));
        let telemetry = builder.build_resolved(own)?;
        let interval = telemetry
            .sampler_stats()
            .map_or(settings.sample_interval, |s| s.interval);
        let devices = telemetry.devices();
        let ids = devices.iter().map(|d| d.device.id()).collect();
        let timelines = Arc::new(Timelines::new(ids, interval));
        let _ = cell.set(Arc::clone(&timelines));
        let source = telemetry.memory_source().unwrap_or("none").to_owned();
        let run_dir = telemetry.run_dir().map(Path::to_path_buf);
        let traces_run_dir = match (&settings.traces, &run_dir) {
            (traces, None) if *traces == Destination::RunDir => {
                let dir = settings.run_dir();
                std::fs::create_dir_all(&dir).map_err(|source| {
                    CollectError::Init(gpuspan::InitError::RunDir {
                        path: dir.clone(),
                        source,
                    })
                })?;
                Some(dir)
            }
            (_, dir) => dir.clone(),
        };
        let forward_to = gpuspan::pipeline::describe(&settings.traces, traces_run_dir.as_deref());

        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("gpuspan-collect")
            .enable_all()
            .build()
            .map_err(CollectError::Runtime)?;
        let sinks = Sinks::open(&settings, traces_run_dir.as_deref(), runtime.handle()).map_err(
            |failed| CollectError::Forward {
                signal: failed.signal,
                reason: failed.error.to_string(),
            },
        )?;
        let enricher = Enricher::new(&source, &timelines.device_ids);
        let metrics_to = gpuspan::pipeline::describe(&settings.metrics, traces_run_dir.as_deref());
        let names = [forward_to.as_str(), metrics_to.as_str()];
        let forwarding = Forwarding::start(sinks, enricher, Arc::clone(&timelines), names)
            .map_err(CollectError::Runtime)?;
        let forwarding = Arc::new(forwarding);
        let (stop, _) = watch::channel(false);
        let intake = server::Intake::new(
            Arc::clone(&forwarding),
            Budget::new(options.max_queue_bytes),
            options.max_request_bytes,
            options.max_concurrent_requests,
        );
        let router = server::router(intake);
        let connections = server::connection_limit(options.max_connections);
        let tls = match &options.tls {
            Some((cert, key)) => Some(super::tls::server_config(cert, key)?),
            None => None,
        };
        let mut servers = Vec::new();
        let mut bound = [None, None];
        for (slot, addr) in [options.grpc, options.http].into_iter().enumerate() {
            let Some(addr) = addr else { continue };
            let mut stopped = stop.subscribe();
            let signal = async move {
                let _ = stopped.wait_for(|s| *s).await;
            };
            let (local, task) = runtime
                .block_on(server::serve(
                    addr,
                    router.clone(),
                    Arc::clone(&connections),
                    tls.clone(),
                    signal,
                ))
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
            forwarding,
            runtime: Some(runtime),
            servers,
            stop,
            grpc_addr: bound[0],
            http_addr: bound[1],
            run_dir: traces_run_dir,
            run_id: settings.run_id.clone(),
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

    /// The run's id (its directory's name, when it writes one).
    pub fn run_id(&self) -> &str {
        &self.run_id
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
        self.forwarding.stats()
    }

    pub(crate) fn timelines(&self) -> &Arc<Timelines> {
        &self.timelines
    }

    pub(crate) fn enricher(&self) -> Enricher {
        let source = self
            .telemetry
            .as_ref()
            .and_then(|t| t.memory_source())
            .unwrap_or("none");
        Enricher::new(source, &self.timelines.device_ids)
    }

    /// Forwards spans the collector made itself (the `run` span), never refused.
    pub(crate) fn queue_ready(&self, request: ExportTraceServiceRequest) {
        self.forwarding.own_spans(request);
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
        self.forwarding.close();
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }

    /// Blocks until the servers and the forward queues are done: call it where blocking is allowed
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
        self.forwarding.shutdown(drain);
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

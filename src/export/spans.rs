//! The span processor: a bounded queue, its own export thread, retry with backoff, and
//! exact accounting.
//!
//! `on_end` runs on the training thread: it takes the span's memory figures handed over by
//! the layer, and pushes both onto a channel. Nothing else happens there: no I/O, no lock
//! but the channel's, no write to stderr.
//!
//! The export thread turns figures into attributes, passes every span through the taps
//! (summary, durations, diagnosis, pictures), and keeps the spans that wait for the
//! destination in one bounded buffer. A failed export keeps its spans and is retried with
//! exponential backoff, as the OpenTelemetry Collector's queued retry does, while new spans
//! keep arriving. The queue's size bounds the spans that wait, in the channel and in the
//! buffer together; near it the oldest waiting spans are given up to make room, and a span
//! that ends while the queue is full (the export thread has not made room yet) is refused.
//! The one export in progress holds at most [`most_in_flight`] spans more (and the
//! exporter's copy of them). Every span is counted either way, so `delivered + lost ==
//! produced` at shutdown.
//!
//! Flushes and shutdowns may arrive while another is running (a signal's flush, then the
//! program's own shutdown on its way out): each waits for the same drain and is answered
//! when the buffer is empty or its own deadline has passed; a shutdown is answered last.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{self, TryRecvError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use opentelemetry::Context;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::{Span, SpanData, SpanExporter, SpanProcessor};
use opentelemetry_sdk::Resource;

use super::health::ExportHealth;
use super::returns::{Returned, Returns};
use super::tap::SpanTap;
use crate::runlog::SpanRecord;
use crate::sampler::Shared;
use crate::span::SpanFigures;

/// Queue sizes and timings.
#[derive(Debug, Clone, Copy)]
pub(crate) struct QueueConfig {
    /// Spans that may wait for the destination, in the channel and in the buffer together.
    pub(crate) capacity: usize,
    /// Spans per export request.
    pub(crate) batch: usize,
    /// Longest wait before a partial batch is sent.
    pub(crate) delay: Duration,
    /// First retry delay; doubles up to `max_backoff`.
    pub(crate) backoff: Duration,
    pub(crate) max_backoff: Duration,
}

impl Default for QueueConfig {
    fn default() -> Self {
        Self {
            capacity: crate::config::DEFAULT_EXPORT_QUEUE,
            batch: 512,
            delay: Duration::from_millis(500),
            backoff: Duration::from_millis(100),
            max_backoff: Duration::from_secs(5),
        }
    }
}

/// Where a batch goes: an OTLP exporter driven by a runtime, or a local writer.
pub(crate) enum Sink<E> {
    /// Sends on the runtime, so the export thread keeps taking spans while it waits.
    Remote(Arc<E>, tokio::runtime::Handle),
    /// Writes on the export thread (a file, standard output, or nowhere).
    Local(E),
}

/// What the export thread is sent. Spans travel by value: a box would be allocated on the
/// training thread and freed on the export thread, the allocator's slowest path.
#[allow(clippy::large_enum_variant, reason = "by value on purpose, see above")]
enum Message {
    Span(SpanData, Option<SpanFigures>),
    Resource(Resource),
    Flush(mpsc::SyncSender<OTelSdkResult>, Duration),
    Shutdown(mpsc::SyncSender<OTelSdkResult>, Duration),
}

/// The span processor: a channel to the export thread.
#[derive(Debug)]
pub(crate) struct QueueProcessor {
    sender: mpsc::Sender<Message>,
    returns: Arc<Returns>,
    /// The export thread, woken for a full batch or a request; it wakes by itself for a
    /// partial batch, so most spans cost the training thread no system call.
    worker: std::thread::Thread,
    wake_every: usize,
    /// Spans in the channel, not yet through the taps.
    queued: Arc<AtomicUsize>,
    /// Spans waiting (in the channel and the buffer); never above `capacity`.
    held: Arc<AtomicUsize>,
    capacity: usize,
    /// Above `capacity - room`, the export thread gives up the oldest waiting spans, so a
    /// span that ends finds room rather than being refused.
    room: usize,
    health: Arc<ExportHealth>,
    thread: Mutex<Option<JoinHandle<()>>>,
    closed: AtomicBool,
    flush_timeout: Duration,
}

impl QueueProcessor {
    /// Starts the export thread.
    pub(crate) fn start<E: SpanExporter + 'static>(
        sink: Sink<E>,
        config: QueueConfig,
        health: Arc<ExportHealth>,
        taps: Vec<Box<dyn SpanTap>>,
        flush_timeout: Duration,
        shared: Arc<Shared>,
    ) -> std::io::Result<Self> {
        let (sender, receiver) = mpsc::channel();
        let queued = Arc::new(AtomicUsize::new(0));
        let held = Arc::new(AtomicUsize::new(0));
        let returns = Arc::new(Returns::default());
        // Woken before the channel can fill, with a queue smaller than a batch too.
        let wake_every = config.batch.min(config.capacity / 2).max(1);
        let room = (config.capacity / 8).min(wake_every);
        let mut worker = Worker {
            sink,
            config,
            queued: Arc::clone(&queued),
            held: Arc::clone(&held),
            room,
            health: Arc::clone(&health),
            waiting: VecDeque::new(),
            in_flight: None,
            retry_at: None,
            backoff: config.backoff,
            taps,
            attributes: Vec::new(),
            shared,
            returns: Arc::clone(&returns),
            returned: Vec::new(),
        };
        let thread = std::thread::Builder::new()
            .name("gpuspan-spans".into())
            .spawn(move || {
                super::silence_tracing();
                super::background_priority();
                worker.run(&receiver);
            })?;
        Ok(Self {
            sender,
            returns,
            worker: thread.thread().clone(),
            wake_every,
            queued,
            held,
            capacity: config.capacity,
            room,
            health,
            thread: Mutex::new(Some(thread)),
            closed: AtomicBool::new(false),
            flush_timeout,
        })
    }

    /// Spans ended but not yet through the taps.
    pub(crate) fn backlog(&self) -> Backlog {
        Backlog {
            queued: Arc::clone(&self.queued),
            worker: Some(self.worker.clone()),
        }
    }

    /// Sends a request and wakes the export thread for it.
    fn send(&self, message: Message) -> bool {
        let sent = self.sender.send(message).is_ok();
        self.worker.unpark();
        sent
    }

    fn request(
        &self,
        make: impl FnOnce(mpsc::SyncSender<OTelSdkResult>, Duration) -> Message,
        timeout: Duration,
    ) -> OTelSdkResult {
        let (reply, answer) = mpsc::sync_channel(1);
        if !self.send(make(reply, timeout)) {
            return Err(OTelSdkError::AlreadyShutdown);
        }
        // The worker answers by the deadline; the slack covers one local write.
        answer
            .recv_timeout(timeout + Duration::from_millis(500))
            .map_err(|_| OTelSdkError::Timeout(timeout))?
    }
}

impl SpanProcessor for QueueProcessor {
    fn on_start(&self, _span: &mut Span, _cx: &Context) {}

    fn on_end(&self, span: SpanData) {
        let figures = crate::layer::closing();
        self.returns.free_some();
        if !span.span_context.is_sampled() {
            return;
        }
        self.health.produced(1);
        if self.closed.load(Ordering::Relaxed) {
            self.health.lost(1, "the span ended after shutdown");
            return;
        }
        let held = self.held.fetch_add(1, Ordering::Relaxed);
        if held >= self.capacity {
            self.held.fetch_sub(1, Ordering::Relaxed);
            self.health.lost(1, self.health.overflow_reason());
            // So it gives up the oldest and makes room for the next span.
            self.worker.unpark();
            return;
        }
        let queued = self.queued.fetch_add(1, Ordering::Relaxed);
        if self.sender.send(Message::Span(span, figures)).is_err() {
            self.queued.fetch_sub(1, Ordering::Relaxed);
            self.held.fetch_sub(1, Ordering::Relaxed);
            self.health.lost(1, "the export thread has stopped");
            return;
        }
        if (queued + 1) % self.wake_every == 0 || held + 1 >= self.capacity - self.room {
            self.worker.unpark();
        }
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.request(Message::Flush, self.flush_timeout)
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        if self.closed.swap(true, Ordering::Relaxed) {
            return Err(OTelSdkError::AlreadyShutdown);
        }
        let result = self.request(Message::Shutdown, timeout);
        if result.is_ok() {
            if let Some(thread) = self.thread.lock().ok().and_then(|mut t| t.take()) {
                let _ = thread.join();
            }
        }
        result
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.send(Message::Resource(resource.clone()));
    }
}

impl Drop for QueueProcessor {
    /// Dropped without a shutdown: the export thread, maybe parked until its next batch
    /// delay, delivers what it can in a short while and stops (as when its channel closes).
    fn drop(&mut self) {
        if !self.closed.swap(true, Ordering::Relaxed) {
            let (reply, _) = mpsc::sync_channel(1);
            self.send(Message::Shutdown(reply, Duration::from_secs(1)));
        }
    }
}

/// The spans ended but not yet through the taps, and a way to have them taken now.
#[derive(Debug, Clone, Default)]
pub(crate) struct Backlog {
    queued: Arc<AtomicUsize>,
    worker: Option<std::thread::Thread>,
}

impl Backlog {
    /// Wakes the export thread and waits, at most until `by`, for every ended span to
    /// have passed the taps.
    pub(crate) fn settle(&self, by: Instant) {
        if let Some(worker) = &self.worker {
            worker.unpark();
        }
        while self.queued.load(Ordering::Relaxed) > 0 && Instant::now() < by {
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// [`Backlog::settle`] for async code (the Prometheus endpoint's runtime).
    #[cfg(feature = "prometheus")]
    pub(crate) async fn settled(&self, by: Instant) {
        if let Some(worker) = &self.worker {
            worker.unpark();
        }
        while self.queued.load(Ordering::Relaxed) > 0 && Instant::now() < by {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
}

/// An export in progress: its spans stay here (the exporter has copies) until the
/// destination accepts them, and go back to the front of the buffer if it does not.
struct InFlight {
    spans: Arc<Vec<SpanData>>,
    result: tokio::task::JoinHandle<OTelSdkResult>,
}

/// A flush or shutdown waiting for the buffer to empty.
struct Drain {
    reply: mpsc::SyncSender<OTelSdkResult>,
    deadline: Instant,
    shutdown: bool,
}

impl Drain {
    fn new(reply: mpsc::SyncSender<OTelSdkResult>, timeout: Duration, shutdown: bool) -> Self {
        let now = Instant::now();
        Self {
            reply,
            deadline: now
                .checked_add(timeout)
                .unwrap_or(now + Duration::from_secs(86_400)),
            shutdown,
        }
    }
}

/// The export thread's state.
struct Worker<E> {
    sink: Sink<E>,
    config: QueueConfig,
    queued: Arc<AtomicUsize>,
    /// Spans waiting; the export thread lowers it as spans leave for the destination or are
    /// given up.
    held: Arc<AtomicUsize>,
    /// See [`QueueProcessor`]'s field of that name.
    room: usize,
    health: Arc<ExportHealth>,
    /// Spans received and not yet sent, oldest first.
    waiting: VecDeque<SpanData>,
    in_flight: Option<InFlight>,
    /// After a failed export: no new attempt before this.
    retry_at: Option<Instant>,
    backoff: Duration,
    taps: Vec<Box<dyn SpanTap>>,
    attributes: Vec<opentelemetry::KeyValue>,
    /// The sampler's device list and keys, held here rather than by every span: a count
    /// shared by the training thread and this one would move between their cores twice
    /// per span.
    shared: Arc<Shared>,
    /// Replaced attribute lists go back to be freed where they were allocated.
    returns: Arc<Returns>,
    returned: Vec<Returned>,
}

/// How often the worker looks at an export in progress.
const POLL: Duration = Duration::from_millis(2);

impl<E: SpanExporter + 'static> Worker<E> {
    fn run(&mut self, receiver: &mpsc::Receiver<Message>) {
        let mut deadline = Instant::now() + self.config.delay;
        // Flushes and shutdowns not yet answered, in the order they came.
        let mut drains: Vec<Drain> = Vec::new();
        // The channel may hold more than was taken last time.
        let mut more = true;
        loop {
            let now = Instant::now();
            let wait = if self.in_flight.is_some() || !drains.is_empty() {
                POLL
            } else {
                let until = match self.retry_at {
                    Some(retry) if !self.waiting.is_empty() => retry,
                    _ => deadline,
                };
                until.saturating_duration_since(now).max(POLL)
            };
            if !more {
                // Woken early by a full batch or a flush, shutdown or new resource.
                std::thread::park_timeout(wait);
            }
            // Take what is queued, up to a batch, before looking at exports: under a
            // steady flood the channel is never empty, and the exports must still go out.
            more = false;
            for taken in 1..=self.config.batch {
                match receiver.try_recv() {
                    Ok(message) => {
                        self.handle(message, &mut drains);
                        more = taken == self.config.batch;
                    }
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => {
                        if !drains.iter().any(|d| d.shutdown) {
                            // The processor was dropped without a shutdown: deliver what
                            // can be delivered in a short while, then stop.
                            let reply = mpsc::sync_channel(1).0;
                            drains.push(Drain::new(reply, Duration::from_secs(1), true));
                        }
                        break;
                    }
                }
            }
            self.poll_in_flight();
            let now = Instant::now();
            let due = now >= deadline || !drains.is_empty();
            if self.waiting.len() >= self.config.batch || (due && !self.waiting.is_empty()) {
                self.try_export(now);
            }
            if now >= deadline {
                deadline = now + self.config.delay;
            }
            self.health.warn_once();
            if !drains.is_empty() && self.answer_due(&mut drains, now) {
                // Spans that ended while shutting down: counted, not dropped silently.
                let late = receiver
                    .try_iter()
                    .filter(|m| matches!(m, Message::Span(..)))
                    .count();
                self.held.fetch_sub(late, Ordering::Relaxed);
                self.health
                    .lost(late as u64, "the span ended during shutdown");
                return;
            }
        }
    }

    fn handle(&mut self, message: Message, drains: &mut Vec<Drain>) {
        match message {
            Message::Span(span, figures) => {
                self.accept(span, figures);
                // After the taps: a backlog of zero means every ended span was seen by them.
                self.queued.fetch_sub(1, Ordering::Relaxed);
            }
            Message::Resource(resource) => match &mut self.sink {
                Sink::Remote(exporter, _) => {
                    if let Some(exporter) = Arc::get_mut(exporter) {
                        exporter.set_resource(&resource);
                    }
                }
                Sink::Local(exporter) => exporter.set_resource(&resource),
            },
            Message::Flush(reply, timeout) => {
                drains.push(Drain::new(reply, timeout, false));
                // A flush does not wait for a backoff to end.
                self.retry_at = None;
            }
            Message::Shutdown(reply, timeout) => {
                drains.push(Drain::new(reply, timeout, true));
                self.retry_at = None;
            }
        }
    }

    /// Answers every request that is due: all of them once nothing waits, else those past
    /// their own deadline. Flushes are answered before a shutdown, which also answers any
    /// flush still waiting; returns `true` when the thread should stop.
    fn answer_due(&mut self, drains: &mut Vec<Drain>, now: Instant) -> bool {
        let empty = self.waiting.is_empty() && self.in_flight.is_none();
        let mut shutdown = None;
        let mut index = 0;
        while index < drains.len() {
            if !empty && drains[index].deadline > now {
                index += 1;
                continue;
            }
            let drain = drains.remove(index);
            if !drain.shutdown {
                self.answer_flush(drain);
            } else if shutdown.is_none() {
                shutdown = Some(drain);
            } else {
                let _ = drain.reply.send(Err(OTelSdkError::AlreadyShutdown));
            }
        }
        let Some(shutdown) = shutdown else {
            return false;
        };
        for flush in drains.drain(..) {
            self.answer_flush(flush);
        }
        self.finish_shutdown(shutdown);
        true
    }

    /// Answers a flush: done when nothing is left to send.
    fn answer_flush(&mut self, drain: Drain) {
        self.flush_taps();
        let result = if self.left() == 0 {
            match &self.sink {
                Sink::Local(exporter) => exporter.force_flush(),
                Sink::Remote(..) => Ok(()),
            }
        } else {
            Err(OTelSdkError::Timeout(Duration::ZERO))
        };
        let _ = drain.reply.send(result);
    }

    /// Spans not yet delivered: waiting, and in the export in progress.
    fn left(&self) -> usize {
        self.waiting.len() + self.in_flight.as_ref().map_or(0, |f| f.spans.len())
    }

    /// Adds the span's memory attributes, shows it to every tap, and buffers it.
    fn accept(&mut self, mut span: SpanData, figures: Option<SpanFigures>) {
        let mut record = (!self.taps.is_empty()).then(|| SpanRecord::from_span_data(&span));
        if let Some(mut figures) = figures {
            // Allocator peaks the program recorded on the span itself (the Python package's
            // exact per-span peaks) win over the pushed counters' watermark.
            let has = |key: &str| span.attributes.iter().any(|kv| kv.key.as_str() == key);
            if figures.allocated_peak.is_some() && has("gpu.allocator.allocated.peak") {
                figures.allocated_peak = None;
            }
            if figures.reserved_peak.is_some() && has("gpu.allocator.reserved.peak") {
                figures.reserved_peak = None;
            }
            if let Some(record) = &mut record {
                figures.complete_record(&self.shared, record);
            }
            // A new list made here: growing the one the training thread allocated would
            // take that thread's allocator lock from this one; the old one goes back there.
            self.attributes.clear();
            figures.attributes(&self.shared, &mut self.attributes);
            let mut attributes = Vec::with_capacity(span.attributes.len() + self.attributes.len());
            attributes.append(&mut span.attributes);
            attributes.append(&mut self.attributes);
            let old = std::mem::replace(&mut span.attributes, attributes);
            self.returned.push(Returned::Attributes(old));
            if let Some(error) = &figures.error {
                span.status = opentelemetry::trace::Status::error(error.clone());
                if let Some(record) = &mut record {
                    record.error = Some(error.clone());
                }
            }
            if figures.devices.capacity() > 0 {
                self.returned
                    .push(Returned::Devices(std::mem::take(&mut figures.devices)));
            }
            if self.returned.len() >= 64 {
                self.returns.hand_back(&mut self.returned);
            }
        }
        if let Some(record) = &record {
            each_tap(&mut self.taps, |tap| tap.on_span(&mut span, record));
        }
        self.waiting.push_back(span);
        self.give_up_overflow();
    }

    /// Near the queue's size, gives up the oldest waiting spans so that a span that ends
    /// finds room (those of an export in progress are not waiting: they may still be
    /// delivered).
    fn give_up_overflow(&mut self) {
        let limit = self.config.capacity - self.room;
        let held = self.held.load(Ordering::Relaxed);
        let over = held.saturating_sub(limit).min(self.waiting.len());
        if over == 0 {
            return;
        }
        self.waiting.drain(..over);
        self.held.fetch_sub(over, Ordering::Relaxed);
        self.health.lost(over as u64, self.health.overflow_reason());
    }

    /// Starts (remote) or performs (local) one export of the oldest waiting spans.
    fn try_export(&mut self, now: Instant) {
        if self.in_flight.is_some() || self.retry_at.is_some_and(|at| now < at) {
            return;
        }
        let most = match self.sink {
            Sink::Remote(..) => most_in_flight(&self.config),
            Sink::Local(_) => self.config.batch,
        };
        let count = self.waiting.len().min(most);
        if count == 0 {
            return;
        }
        match &self.sink {
            Sink::Remote(exporter, runtime) => {
                let spans: Arc<Vec<SpanData>> = Arc::new(self.waiting.drain(..count).collect());
                // No longer waiting: counted again if they come back after a failure.
                self.held.fetch_sub(count, Ordering::Relaxed);
                let shared = Arc::clone(&spans);
                let exporter = Arc::clone(exporter);
                let result = runtime.spawn(async move {
                    // Copied where the copy is encoded and freed, so no allocation crosses
                    // threads for it.
                    let batch = shared.to_vec();
                    drop(shared);
                    exporter.export(batch).await
                });
                self.in_flight = Some(InFlight { spans, result });
            }
            Sink::Local(exporter) => {
                let batch: Vec<SpanData> = self.waiting.drain(..count).collect();
                let result = super::block_on(None, exporter.export(batch));
                // A local write that fails (disk full) is not retried: the spans are lost.
                self.held.fetch_sub(count, Ordering::Relaxed);
                match result {
                    Ok(()) => self.health.delivered(count as u64),
                    Err(error) => self.health.lost(count as u64, &error.to_string()),
                }
            }
        }
    }

    /// Looks at the export in progress: delivered spans leave the buffer; a failure keeps
    /// them and schedules a retry.
    fn poll_in_flight(&mut self) {
        let Some(in_flight) = self.in_flight.as_mut() else {
            return;
        };
        if !in_flight.result.is_finished() {
            return;
        }
        let Some(InFlight { spans, result }) = self.in_flight.take() else {
            return;
        };
        let result = match futures_now(result) {
            Ok(result) => result,
            Err(panic) => Err(OTelSdkError::InternalFailure(panic)),
        };
        match result {
            Ok(()) => {
                self.health.delivered(spans.len() as u64);
                self.retry_at = None;
                self.backoff = self.config.backoff;
            }
            Err(error) => {
                self.health.failed(&error.to_string());
                self.retry_at = Some(Instant::now() + self.backoff);
                self.backoff = (self.backoff * 2).min(self.config.max_backoff);
                // Back in front, in order: they are still the oldest.
                let spans = Arc::try_unwrap(spans).unwrap_or_else(|shared| shared.to_vec());
                self.held.fetch_add(spans.len(), Ordering::Relaxed);
                for span in spans.into_iter().rev() {
                    self.waiting.push_front(span);
                }
                self.give_up_overflow();
            }
        }
    }

    /// Answers the shutdown: what is left is counted lost and the exporter shut down.
    fn finish_shutdown(&mut self, drain: Drain) {
        self.flush_taps();
        let left = self.left();
        if let Some(in_flight) = self.in_flight.take() {
            in_flight.result.abort();
        }
        self.held.fetch_sub(self.waiting.len(), Ordering::Relaxed);
        self.health.lost(
            left as u64,
            "the destination did not accept them before the shutdown timeout",
        );
        self.waiting.clear();
        let result = match &mut self.sink {
            Sink::Local(exporter) => exporter.shutdown(),
            Sink::Remote(exporter, _) => match Arc::get_mut(exporter) {
                Some(exporter) => exporter.shutdown(),
                None => Ok(()),
            },
        };
        let _ = drain.reply.send(result);
    }

    fn flush_taps(&mut self) {
        each_tap(&mut self.taps, |tap| tap.flush());
    }
}

/// Runs `call` on every tap. A tap that panics is switched off with one warning line, so
/// the span (and every later one) is still exported and counted: a bug in a summary or a
/// diagnosis must not stop the export thread.
fn each_tap(taps: &mut Vec<Box<dyn SpanTap>>, mut call: impl FnMut(&mut dyn SpanTap)) {
    let mut i = 0;
    while i < taps.len() {
        let tap = taps[i].as_mut();
        if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| call(tap))).is_ok() {
            i += 1;
            continue;
        }
        let tap = taps.remove(i);
        eprintln!(
            "gpuspan: warning: the {} span tap panicked and is switched off; spans are still \
             exported",
            tap.name()
        );
        // Its state may be broken halfway: dropping it must not take the thread down either.
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || drop(tap)));
    }
}

/// The most spans one export request takes: a backlog goes out in larger requests (up to
/// four batches, about 2 MiB of OTLP), so a collector's round trip does not cap the rate;
/// and at most half the queue, so a small queue keeps room for the newest spans.
pub(crate) fn most_in_flight(config: &QueueConfig) -> usize {
    (config.batch * 4).min(config.capacity / 2).max(1)
}

/// The output of a finished task.
fn futures_now<T: Send>(handle: tokio::task::JoinHandle<T>) -> Result<T, String> {
    super::block_on(None, handle).map_err(|e| format!("the export task failed: {e}"))
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;
    use std::time::{Duration, Instant, SystemTime};

    use opentelemetry::trace::{SpanContext, SpanId, SpanKind, Status, TraceFlags, TraceId};
    use opentelemetry::InstrumentationScope;
    use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
    use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanExporter, SpanLinks, SpanProcessor};

    use super::{QueueConfig, QueueProcessor, Sink};
    use crate::export::health::ExportHealth;
    use crate::export::tap::SpanTap;
    use crate::runlog::SpanRecord;

    fn span(i: u64) -> SpanData {
        SpanData {
            span_context: SpanContext::new(
                TraceId::from(1_u128),
                SpanId::from(i + 1),
                TraceFlags::SAMPLED,
                false,
                Default::default(),
            ),
            parent_span_id: SpanId::INVALID,
            parent_span_is_remote: false,
            span_kind: SpanKind::Internal,
            name: "step".into(),
            start_time: SystemTime::now(),
            end_time: SystemTime::now(),
            attributes: vec![opentelemetry::KeyValue::new("ml.step", i as i64)],
            dropped_attributes_count: 0,
            events: SpanEvents::default(),
            links: SpanLinks::default(),
            status: Status::Unset,
            instrumentation_scope: InstrumentationScope::builder("test").build(),
        }
    }

    /// A destination that takes `pause` per export and counts what it got, or refuses.
    #[derive(Debug, Clone)]
    struct Destination {
        pause: Duration,
        refuse: bool,
        got: Arc<AtomicU64>,
    }

    impl SpanExporter for Destination {
        async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
            std::thread::sleep(self.pause);
            if self.refuse {
                return Err(OTelSdkError::InternalFailure("connection refused".into()));
            }
            self.got.fetch_add(batch.len() as u64, Ordering::Relaxed);
            Ok(())
        }
    }

    /// Makes the export thread slower per span than the producer, so its channel never
    /// runs dry while the flood lasts.
    struct SlowTap;

    impl SpanTap for SlowTap {
        fn on_span(&mut self, _span: &mut SpanData, _record: &SpanRecord) {
            let until = Instant::now() + Duration::from_micros(20);
            while Instant::now() < until {
                std::hint::spin_loop();
            }
        }
    }

    fn no_devices() -> Arc<crate::sampler::Shared> {
        Arc::new(crate::sampler::Shared::new(
            "none".into(),
            Vec::new(),
            Duration::from_millis(5),
        ))
    }

    fn config(capacity: usize) -> QueueConfig {
        QueueConfig {
            capacity,
            batch: 64,
            ..QueueConfig::default()
        }
    }

    /// Offers spans as fast as the thread goes for `time`; returns how many.
    fn flood(processor: &QueueProcessor, time: Duration) -> u64 {
        let start = Instant::now();
        let mut produced = 0;
        while start.elapsed() < time {
            processor.on_end(span(produced));
            produced += 1;
        }
        produced
    }

    #[test]
    fn a_flood_of_spans_does_not_hold_back_the_exports() {
        let got = Arc::new(AtomicU64::new(0));
        let destination = Destination {
            pause: Duration::from_millis(1),
            refuse: false,
            got: Arc::clone(&got),
        };
        let health = Arc::new(ExportHealth::new("test".into(), "span"));
        let processor = QueueProcessor::start(
            Sink::Local(destination),
            config(20_000),
            Arc::clone(&health),
            vec![Box::new(SlowTap)],
            Duration::from_secs(30),
            no_devices(),
        )
        .expect("the export thread starts");
        let produced = flood(&processor, Duration::from_millis(400));
        let during = got.load(Ordering::Relaxed);
        assert!(
            processor.backlog().queued.load(Ordering::Relaxed) > 0,
            "the flood must outrun the export thread for this test to mean anything"
        );
        assert!(
            during >= 64,
            "spans were delivered during the flood ({during} of {produced}): exports must \
             not wait for the channel to run dry"
        );
        processor
            .shutdown_with_timeout(Duration::from_secs(30))
            .expect("shutdown");
        let counts = health.counts();
        assert_eq!(counts.produced, produced);
        assert_eq!(counts.delivered + counts.lost, produced);
        assert_eq!(got.load(Ordering::Relaxed), counts.delivered);
    }

    #[test]
    fn a_full_queue_says_whether_the_destination_was_slow_or_down() {
        for refuse in [false, true] {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
                .expect("a runtime");
            let got = Arc::new(AtomicU64::new(0));
            let destination = Arc::new(Destination {
                pause: Duration::from_millis(20),
                refuse,
                got: Arc::clone(&got),
            });
            let health = Arc::new(ExportHealth::new("test".into(), "span"));
            let processor = QueueProcessor::start(
                Sink::Remote(destination, runtime.handle().clone()),
                config(200),
                Arc::clone(&health),
                Vec::new(),
                Duration::from_millis(200),
                no_devices(),
            )
            .expect("the export thread starts");
            let produced = flood(&processor, Duration::from_millis(300));
            // Read before shutdown, whose own losses have their own reason.
            let reason = health.last_error().unwrap_or_default();
            // What a span given up now would be counted as.
            let overflow = health.overflow_reason();
            let _ = processor.shutdown_with_timeout(Duration::from_millis(200));
            let counts = health.counts();
            assert!(
                counts.lost > 0,
                "a 200-span queue under a flood loses spans"
            );
            assert_eq!(counts.produced, produced);
            assert_eq!(counts.delivered + counts.lost, produced);
            assert_eq!(got.load(Ordering::Relaxed), counts.delivered);
            if refuse {
                assert!(
                    overflow.contains("unreachable"),
                    "a refusing destination: {overflow:?}"
                );
                assert!(
                    reason.contains("unreachable") || reason.contains("connection refused"),
                    "a refusing destination: {reason:?}"
                );
            } else {
                assert!(overflow.contains("came faster"), "{overflow:?}");
                assert!(
                    reason.contains("came faster than the destination took them"),
                    "a slow destination is not an unreachable one: {reason:?}"
                );
                assert!(counts.delivered > 0);
            }
        }
    }

    fn remote(
        pause: Duration,
        refuse: bool,
        capacity: usize,
        taps: Vec<Box<dyn SpanTap>>,
    ) -> (
        tokio::runtime::Runtime,
        QueueProcessor,
        Arc<ExportHealth>,
        Arc<AtomicU64>,
    ) {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("a runtime");
        let got = Arc::new(AtomicU64::new(0));
        let destination = Arc::new(Destination {
            pause,
            refuse,
            got: Arc::clone(&got),
        });
        let health = Arc::new(ExportHealth::new("test".into(), "span"));
        let processor = QueueProcessor::start(
            Sink::Remote(destination, runtime.handle().clone()),
            config(capacity),
            Arc::clone(&health),
            taps,
            Duration::from_secs(30),
            no_devices(),
        )
        .expect("the export thread starts");
        (runtime, processor, health, got)
    }

    #[test]
    fn a_shutdown_that_arrives_during_a_flush_waits_for_it_and_loses_nothing() {
        // 1,000 spans in requests of 256 that take 150 ms each: the flush takes about 600 ms.
        let (_runtime, processor, health, got) =
            remote(Duration::from_millis(150), false, 10_000, Vec::new());
        for i in 0..1_000 {
            processor.on_end(span(i));
        }
        std::thread::scope(|scope| {
            let flush = scope.spawn(|| processor.force_flush());
            std::thread::sleep(Duration::from_millis(100));
            let started = Instant::now();
            let shutdown = processor.shutdown_with_timeout(Duration::from_secs(30));
            assert!(
                shutdown.is_ok(),
                "the shutdown waits for the flush's drain: {shutdown:?}"
            );
            assert!(
                started.elapsed() >= Duration::from_millis(200),
                "the shutdown was answered before the spans were delivered"
            );
            let flush = flush.join().expect("the flush thread");
            assert!(flush.is_ok(), "{flush:?}");
        });
        let counts = health.counts();
        assert_eq!(counts.produced, 1_000);
        assert_eq!(counts.delivered, 1_000, "{counts:?}");
        assert_eq!(counts.lost, 0);
        assert_eq!(got.load(Ordering::Relaxed), 1_000);
    }

    #[test]
    fn two_flushes_at_once_both_wait_for_every_span() {
        let (_runtime, processor, health, got) =
            remote(Duration::from_millis(100), false, 10_000, Vec::new());
        for i in 0..1_000 {
            processor.on_end(span(i));
        }
        std::thread::scope(|scope| {
            let first = scope.spawn(|| processor.force_flush());
            std::thread::sleep(Duration::from_millis(50));
            let second = processor.force_flush();
            assert!(second.is_ok(), "{second:?}");
            assert_eq!(
                got.load(Ordering::Relaxed),
                1_000,
                "the second flush returned before the spans were delivered"
            );
            let first = first.join().expect("the flush thread");
            assert!(first.is_ok(), "{first:?}");
        });
        processor
            .shutdown_with_timeout(Duration::from_secs(5))
            .expect("shutdown");
        assert_eq!(health.counts().delivered, 1_000);
    }

    #[test]
    fn a_shutdown_with_a_shorter_timeout_than_a_running_flush_keeps_its_own_bound() {
        // Refused for ever: neither request can be satisfied; each ends at its own deadline.
        let (_runtime, processor, health, _got) =
            remote(Duration::from_millis(5), true, 10_000, Vec::new());
        for i in 0..100 {
            processor.on_end(span(i));
        }
        std::thread::scope(|scope| {
            let flush = scope.spawn(|| processor.force_flush());
            std::thread::sleep(Duration::from_millis(50));
            let started = Instant::now();
            let _ = processor.shutdown_with_timeout(Duration::from_millis(300));
            let took = started.elapsed();
            assert!(
                took >= Duration::from_millis(250) && took < Duration::from_secs(5),
                "the shutdown took {took:?} for a 300 ms bound"
            );
            // The flush is answered when the shutdown ends, not after its own 30 s.
            assert!(flush.join().expect("the flush thread").is_err());
        });
        let counts = health.counts();
        assert_eq!(counts.produced, 100);
        assert_eq!(counts.delivered + counts.lost, 100, "{counts:?}");
        assert_eq!(counts.lost, 100);
    }

    #[test]
    fn the_queue_size_bounds_every_span_held_in_all() {
        // Every span carries one reference to `marker`, so the spans alive anywhere (the
        // channel, the buffer, an export in progress and its copy) are counted exactly.
        let marker: Arc<str> = Arc::from("marker");
        let capacity = 1_000;
        let batch = config(capacity).batch;
        let (_runtime, processor, health, _got) = remote(
            Duration::from_millis(20),
            true,
            capacity,
            vec![Box::new(SlowTap)],
        );
        let mut most = 0;
        let mut produced = 0;
        let start = Instant::now();
        while start.elapsed() < Duration::from_millis(400) {
            let mut data = span(produced);
            data.attributes.push(opentelemetry::KeyValue::new(
                "marker",
                opentelemetry::StringValue::from(Arc::clone(&marker)),
            ));
            processor.on_end(data);
            produced += 1;
            most = most.max(Arc::strong_count(&marker) - 1);
        }
        // The spans waiting, plus the request in progress and the exporter's copy of it.
        let bound = capacity + 2 * super::most_in_flight(&config(capacity));
        assert_eq!(super::most_in_flight(&config(capacity)), 4 * batch);
        assert!(
            most <= bound,
            "{most} spans were alive at once with a queue of {capacity} (bound {bound})"
        );
        assert!(
            most >= capacity / 2,
            "the queue never filled ({most}), so the bound was not tested"
        );
        let _ = processor.shutdown_with_timeout(Duration::from_millis(100));
        // On a busy machine the answer may come before the export thread has counted the
        // last spans (its taps are slow on purpose): wait for it, within a bound.
        let waited = Instant::now();
        while health.counts().pending() > 0 && waited.elapsed() < Duration::from_secs(20) {
            std::thread::sleep(Duration::from_millis(10));
        }
        let counts = health.counts();
        assert_eq!(counts.produced, produced);
        assert_eq!(counts.delivered + counts.lost, produced, "{counts:?}");
    }

    /// Panics on the `n`th span it sees.
    struct PanicsOn(u64, u64);

    impl SpanTap for PanicsOn {
        fn on_span(&mut self, _span: &mut SpanData, _record: &SpanRecord) {
            self.1 += 1;
            assert!(self.1 != self.0, "a tap bug on span {}", self.0);
        }
    }

    /// Counts what it sees.
    struct Counts(Arc<AtomicU64>);

    impl SpanTap for Counts {
        fn on_span(&mut self, _span: &mut SpanData, _record: &SpanRecord) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    #[test]
    fn a_tap_that_panics_is_switched_off_and_every_span_is_still_exported() {
        let got = Arc::new(AtomicU64::new(0));
        let destination = Destination {
            pause: Duration::ZERO,
            refuse: false,
            got: Arc::clone(&got),
        };
        let (before, after) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let health = Arc::new(ExportHealth::new("test".into(), "span"));
        let processor = QueueProcessor::start(
            Sink::Local(destination),
            config(1000),
            Arc::clone(&health),
            vec![
                Box::new(Counts(Arc::clone(&before))),
                Box::new(PanicsOn(3, 0)),
                Box::new(Counts(Arc::clone(&after))),
            ],
            Duration::from_secs(30),
            no_devices(),
        )
        .expect("the export thread starts");
        const SPANS: u64 = 10;
        for i in 0..SPANS {
            processor.on_end(span(i));
        }
        processor
            .force_flush()
            .expect("the export thread answers a flush");
        for i in SPANS..2 * SPANS {
            processor.on_end(span(i));
        }
        processor
            .shutdown_with_timeout(Duration::from_secs(30))
            .expect("shutdown");
        let counts = health.counts();
        assert_eq!(counts.produced, 2 * SPANS);
        assert_eq!(counts.delivered, 2 * SPANS);
        assert_eq!(counts.lost, 0);
        assert_eq!(got.load(Ordering::Relaxed), 2 * SPANS);
        assert_eq!(before.load(Ordering::Relaxed), 2 * SPANS);
        assert_eq!(after.load(Ordering::Relaxed), 2 * SPANS);
    }
}

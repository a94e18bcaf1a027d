//! The export queue: a bounded buffer on its own thread, retry with backoff, and exact
//! accounting, in front of any [`Sink`]. The SDK's spans and the collector's forwarded
//! requests both go out through it.
//!
//! [`Queue::push`] runs on the producing thread (the training thread, for spans): it counts
//! the item and puts it on a channel. Nothing else happens there: no I/O, no lock but the
//! channel's, no write to stderr.
//!
//! The queue's thread passes every item through its [`Accept`] step (the span taps, the
//! collector's enrichment) and keeps the items that wait for the destination in one
//! bounded buffer. A failed export keeps its items and is retried with exponential backoff,
//! as the OpenTelemetry Collector's queued retry does, while new items keep arriving. The
//! queue's size bounds the items that wait, in the channel and in the buffer together; near
//! it the oldest waiting items are given up to make room, and an item pushed while the
//! queue is full (the queue's thread has not made room yet) is refused. The one export in
//! progress holds at most [`most_in_flight`] items more (and a sink's copy of them). Every
//! item is counted either way, so `delivered + lost == produced` at shutdown.
//!
//! Flushes and shutdowns may arrive while another is running (a signal's flush, then the
//! program's own shutdown on its way out): each waits for the same drain and is answered
//! when the buffer is empty or its own deadline has passed; a shutdown is answered last.

mod worker;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::Resource;

use super::health::{ExportHealth, Loss};
use super::sink::Sink;

/// Queue sizes and timings.
#[derive(Debug, Clone, Copy)]
pub struct QueueConfig {
    /// Items that may wait for the destination, in the channel and in the buffer together.
    pub capacity: usize,
    /// Items per export request.
    pub batch: usize,
    /// Longest wait before a partial batch is sent.
    pub delay: Duration,
    /// First retry delay; doubles up to `max_backoff`.
    pub backoff: Duration,
    /// The longest retry delay.
    pub max_backoff: Duration,
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

/// The most items one export takes: a backlog goes out in larger requests (up to four
/// batches, about 2 MiB of OTLP spans), so a collector's round trip does not cap the rate;
/// and at most half the queue, so a small queue keeps room for the newest items.
pub(crate) fn most_in_flight(config: &QueueConfig) -> usize {
    (config.batch * 4).min(config.capacity / 2).max(1)
}

/// How the queue drives its sink.
pub enum Transport<S> {
    /// Sends on the runtime, so the queue's thread keeps taking items while it waits;
    /// failures are retried.
    Remote(Arc<S>, tokio::runtime::Handle),
    /// Writes on the queue's thread (a file, standard output, or nowhere); a failed write
    /// is not retried.
    Local(S),
}

impl<S> Transport<S> {
    /// The same transport around another sink, made from this one's (shared) sink.
    pub fn map<T>(self, wrap: impl FnOnce(Arc<S>) -> T) -> Transport<T> {
        match self {
            Self::Remote(sink, runtime) => Transport::Remote(Arc::new(wrap(sink)), runtime),
            Self::Local(sink) => Transport::Local(wrap(Arc::new(sink))),
        }
    }
}

/// What the queue's thread does with a pushed value before it waits for the sink.
pub trait Accept: Send + 'static {
    /// What producers push.
    type Input: Send + 'static;
    /// What travels with it (the SDK: a span's memory figures), as a second field of the
    /// channel's message, so the producer moves each into the message once.
    type Extra: Send + 'static;
    /// What waits and is sent.
    type Item: Send + Sync + 'static;
    /// Turns a pushed value into a waiting item, on the queue's thread.
    fn accept(&mut self, input: Self::Input, extra: Self::Extra) -> Self::Item;
    /// The accounted items a pushed value stands for, as [`Queue::push`] was told.
    fn units(_input: &Self::Input) -> u64 {
        1
    }
    /// A flush or shutdown: write out what is buffered.
    fn flush(&mut self) {}
}

/// What the queue's thread is sent. Items travel by value: a box would be allocated on the
/// producing thread and freed on the queue's thread, the allocator's slowest path.
#[allow(clippy::large_enum_variant, reason = "by value on purpose, see above")]
pub(super) enum Message<I, X> {
    Item(I, X),
    Resource(Resource),
    Flush(mpsc::SyncSender<OTelSdkResult>, Duration),
    Shutdown(mpsc::SyncSender<OTelSdkResult>, Duration),
}

/// The producers' side of a queue.
#[derive(Debug)]
pub struct Queue<I, X = ()> {
    sender: mpsc::Sender<Message<I, X>>,
    /// The queue's thread, woken for a full batch or a request; it wakes by itself for a
    /// partial batch, so most items cost the producer no system call.
    worker: std::thread::Thread,
    wake_every: usize,
    /// Items in the channel, not yet accepted.
    queued: Arc<AtomicUsize>,
    /// Items waiting (in the channel and the buffer); never above `capacity`.
    held: Arc<AtomicUsize>,
    capacity: usize,
    /// Above `capacity - room`, the queue's thread gives up the oldest waiting items, so
    /// an item pushed finds room rather than being refused.
    room: usize,
    health: Arc<ExportHealth>,
    thread: Mutex<Option<JoinHandle<()>>>,
    closed: AtomicBool,
}

impl<I: Send + 'static, X: Send + 'static> Queue<I, X> {
    /// Starts the queue's thread, `name`.
    pub fn start<A, S>(
        name: &str,
        sink: Transport<S>,
        accept: A,
        config: QueueConfig,
        health: Arc<ExportHealth>,
    ) -> std::io::Result<Self>
    where
        A: Accept<Input = I, Extra = X>,
        S: Sink<Item = A::Item>,
    {
        let (sender, receiver) = mpsc::channel();
        let queued = Arc::new(AtomicUsize::new(0));
        let held = Arc::new(AtomicUsize::new(0));
        // Woken before the channel can fill, with a queue smaller than a batch too.
        let wake_every = config.batch.min(config.capacity / 2).max(1);
        let room = (config.capacity / 8).min(wake_every);
        let mut worker = worker::Worker::new(
            sink,
            accept,
            config,
            worker::Shared {
                queued: Arc::clone(&queued),
                held: Arc::clone(&held),
                room,
                health: Arc::clone(&health),
            },
        );
        let thread = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                crate::background::silence_tracing();
                crate::background::background_priority();
                worker.run(&receiver);
            })?;
        Ok(Self {
            sender,
            worker: thread.thread().clone(),
            wake_every,
            queued,
            held,
            capacity: config.capacity,
            room,
            health,
            thread: Mutex::new(Some(thread)),
            closed: AtomicBool::new(false),
        })
    }
}

impl<I, X> Queue<I, X> {
    /// Queues `item` with `extra`, which stand for `units` accounted items, or counts them
    /// lost when
    /// the queue is full or shut down. Never blocks, never writes. Inlined into the
    /// producer, so the item is moved into the channel's message without another copy.
    #[inline(always)]
    pub fn push(&self, item: I, extra: X, units: u64) {
        self.health.produced(units);
        if self.closed.load(Ordering::Relaxed) {
            self.health
                .lost(units, self.health.reason(Loss::AfterShutdown));
            return;
        }
        let held = self.held.fetch_add(1, Ordering::Relaxed);
        if held >= self.capacity {
            self.held.fetch_sub(1, Ordering::Relaxed);
            self.health.lost(units, self.health.overflow_reason());
            // So it gives up the oldest and makes room for the next item.
            self.worker.unpark();
            return;
        }
        let queued = self.queued.fetch_add(1, Ordering::Relaxed);
        if self.sender.send(Message::Item(item, extra)).is_err() {
            self.queued.fetch_sub(1, Ordering::Relaxed);
            self.held.fetch_sub(1, Ordering::Relaxed);
            self.health.lost(units, self.health.reason(Loss::Stopped));
            return;
        }
        if (queued + 1) % self.wake_every == 0 || held + 1 >= self.capacity - self.room {
            self.worker.unpark();
        }
    }

    /// Hands the sink the program's resource.
    pub(crate) fn set_resource(&self, resource: Resource) {
        self.send(Message::Resource(resource));
    }

    /// Waits, at most `timeout`, until every item pushed so far is delivered or given up.
    pub(crate) fn flush(&self, timeout: Duration) -> OTelSdkResult {
        self.request(Message::Flush, timeout)
    }

    /// Delivers what it can within `timeout`, counts the rest lost and stops the thread.
    pub fn shutdown(&self, timeout: Duration) -> OTelSdkResult {
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

    /// Asks for a shutdown within `timeout` and does not wait for it (from async code that
    /// cannot block).
    pub fn close(&self, timeout: Duration) {
        if !self.closed.swap(true, Ordering::Relaxed) {
            let (reply, _) = mpsc::sync_channel(1);
            self.send(Message::Shutdown(reply, timeout));
        }
    }

    /// Items pushed but not yet accepted.
    pub(crate) fn backlog(&self) -> Backlog {
        Backlog {
            queued: Arc::clone(&self.queued),
            worker: Some(self.worker.clone()),
        }
    }

    /// Sends a request and wakes the queue's thread for it.
    fn send(&self, message: Message<I, X>) -> bool {
        let sent = self.sender.send(message).is_ok();
        self.worker.unpark();
        sent
    }

    fn request(
        &self,
        make: impl FnOnce(mpsc::SyncSender<OTelSdkResult>, Duration) -> Message<I, X>,
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

impl<I, X> Drop for Queue<I, X> {
    /// Dropped without a shutdown: the queue's thread, maybe parked until its next batch
    /// delay, delivers what it can in a short while and stops (as when its channel closes).
    fn drop(&mut self) {
        self.close(Duration::from_secs(1));
    }
}

/// The items pushed but not yet accepted, and a way to have them taken now.
#[derive(Debug, Clone, Default)]
pub(crate) struct Backlog {
    queued: Arc<AtomicUsize>,
    worker: Option<std::thread::Thread>,
}

impl Backlog {
    /// Wakes the queue's thread and waits, at most until `by`, for every pushed item to
    /// have been accepted (spans: to have passed the taps).
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

    /// Items pushed and not yet accepted.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.queued.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    use super::{Accept, Queue, QueueConfig, Transport};
    use crate::export::sink::{Sink, SinkError, Undelivered};
    use crate::export::testing;

    /// Items that stand for `n` accounted units each, as a request of `n` spans does.
    struct Requests;

    impl Accept for Requests {
        type Input = u64;
        type Extra = ();
        type Item = u64;
        fn accept(&mut self, units: u64, (): ()) -> u64 {
            units
        }
        fn units(units: &u64) -> u64 {
            *units
        }
    }

    /// Takes the first item of a batch, then fails the rest once (to be retried) or for
    /// good (`refuse`); counts every unit it took.
    struct Destination {
        fail_once: AtomicBool,
        refuse: bool,
        got: Arc<AtomicU64>,
    }

    impl Sink for Destination {
        type Item = u64;

        fn units(units: &u64) -> u64 {
            *units
        }

        async fn send(&self, batch: Arc<Vec<u64>>) -> Result<(), Undelivered> {
            let failing = self.refuse || self.fail_once.swap(false, Ordering::Relaxed);
            let taken = if failing { &batch[..1] } else { &batch[..] };
            self.got
                .fetch_add(taken.iter().sum::<u64>(), Ordering::Relaxed);
            if !failing || batch.len() == 1 {
                return Ok(());
            }
            Err(Undelivered {
                delivered: 1,
                retry: !self.refuse,
                error: SinkError::Write(std::io::Error::other("refused")),
            })
        }
    }

    fn run(refuse: bool) -> (crate::export::health::ExportCounts, u64) {
        let runtime = testing::runtime();
        let got = Arc::new(AtomicU64::new(0));
        let sink = Destination {
            fail_once: AtomicBool::new(true),
            refuse,
            got: Arc::clone(&got),
        };
        let health = testing::health();
        let config = QueueConfig {
            capacity: 100,
            batch: 4,
            backoff: Duration::from_millis(10),
            ..QueueConfig::default()
        };
        let queue = Queue::start(
            "test-queue",
            Transport::Remote(Arc::new(sink), runtime.handle().clone()),
            Requests,
            config,
            Arc::clone(&health),
        )
        .expect("the queue's thread starts");
        for units in 1..=10 {
            queue.push(units, (), units);
        }
        let _ = queue.flush(Duration::from_secs(10));
        queue
            .shutdown(Duration::from_secs(10))
            .expect("the queue shuts down");
        (health.counts(), got.load(Ordering::Relaxed))
    }

    #[test]
    fn a_partly_delivered_batch_counts_each_unit_once_and_retries_only_the_rest() {
        let (counts, got) = run(false);
        assert_eq!(counts.produced, 55);
        assert_eq!(counts.delivered, 55, "{counts:?}");
        assert_eq!(counts.lost, 0);
        assert_eq!(got, 55, "an item taken once is not sent again");
    }

    #[test]
    fn what_the_destination_refuses_for_good_is_counted_lost_in_units() {
        let (counts, got) = run(true);
        assert_eq!(counts.produced, 55);
        assert_eq!(counts.delivered, got, "{counts:?}");
        assert!(counts.lost > 0, "{counts:?}");
        assert_eq!(counts.delivered + counts.lost, 55, "{counts:?}");
    }
}

//! The queue's thread: takes pushed items through the [`Accept`] step into the buffer,
//! sends the oldest to the sink, retries failures with backoff, gives up the oldest near
//! the bound, and answers flushes and shutdowns. Only this thread touches the buffer.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, TryRecvError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};

use super::{most_in_flight, Accept, Message, QueueConfig, Transport};
use crate::export::health::{ExportHealth, Loss};
use crate::export::sink::{Sink, Undelivered};

/// What the producers' side and the queue's thread both see.
pub(super) struct Shared {
    pub(super) queued: Arc<AtomicUsize>,
    /// Items waiting; the queue's thread lowers it as items leave for the destination or
    /// are given up.
    pub(super) held: Arc<AtomicUsize>,
    /// See [`super::Queue`]'s field of that name.
    pub(super) room: usize,
    pub(super) health: Arc<ExportHealth>,
}

/// An export in progress: its items stay here (a remote sink shares them) until the
/// destination accepts them, and go back to the front of the buffer if it does not.
struct InFlight<T> {
    items: Arc<Vec<T>>,
    result: tokio::task::JoinHandle<Result<(), Undelivered>>,
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

/// The queue's thread's state.
pub(super) struct Worker<A: Accept, S> {
    sink: Transport<S>,
    accept: A,
    config: QueueConfig,
    shared: Shared,
    /// Items received and not yet sent, oldest first.
    waiting: VecDeque<A::Item>,
    in_flight: Option<InFlight<A::Item>>,
    /// After a failed export: no new attempt before this.
    retry_at: Option<Instant>,
    backoff: Duration,
}

/// How often the worker looks at an export in progress.
const POLL: Duration = Duration::from_millis(2);

/// The accounted units of `items`.
fn units<'a, S: Sink>(items: impl IntoIterator<Item = &'a S::Item>) -> u64 {
    items.into_iter().map(S::units).sum()
}

impl<A: Accept, S: Sink<Item = A::Item>> Worker<A, S> {
    pub(super) fn new(sink: Transport<S>, accept: A, config: QueueConfig, shared: Shared) -> Self {
        Self {
            sink,
            accept,
            config,
            shared,
            waiting: VecDeque::new(),
            in_flight: None,
            retry_at: None,
            backoff: config.backoff,
        }
    }

    pub(super) fn run(&mut self, receiver: &mpsc::Receiver<Message<A::Input, A::Extra>>) {
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
                            // The queue was dropped without a shutdown: deliver what can
                            // be delivered in a short while, then stop.
                            let reply = mpsc::sync_channel(1).0;
                            drains.push(Drain::new(reply, Duration::from_secs(1), true));
                        }
                        break;
                    }
                }
            }
            self.poll_in_flight();
            let now = Instant::now();
            // A failed batch was due already: its retry waits for its backoff, not for
            // the next batch's delay.
            let retry_due = self.retry_at.is_some_and(|at| now >= at);
            let due = now >= deadline || !drains.is_empty() || retry_due;
            if self.waiting.len() >= self.config.batch || (due && !self.waiting.is_empty()) {
                self.try_export(now);
            }
            if now >= deadline {
                deadline = now + self.config.delay;
            }
            self.shared.health.warn_once();
            if !drains.is_empty() && self.answer_due(&mut drains, now) {
                self.count_late(receiver);
                return;
            }
        }
    }

    /// Items pushed while shutting down: counted, not dropped silently.
    fn count_late(&self, receiver: &mpsc::Receiver<Message<A::Input, A::Extra>>) {
        let (mut late, mut lost) = (0, 0);
        for message in receiver.try_iter() {
            if let Message::Item(input, _) = message {
                late += 1;
                lost += A::units(&input);
            }
        }
        self.shared.held.fetch_sub(late, Ordering::Relaxed);
        let health = &self.shared.health;
        health.lost(lost, health.reason(Loss::DuringShutdown));
    }

    fn handle(&mut self, message: Message<A::Input, A::Extra>, drains: &mut Vec<Drain>) {
        match message {
            Message::Item(input, extra) => {
                let item = self.accept.accept(input, extra);
                self.waiting.push_back(item);
                self.give_up_overflow();
                // After the accept step: a backlog of zero means every pushed item passed.
                self.shared.queued.fetch_sub(1, Ordering::Relaxed);
            }
            Message::Resource(resource) => match &mut self.sink {
                Transport::Remote(sink, _) => {
                    if let Some(sink) = Arc::get_mut(sink) {
                        sink.set_resource(&resource);
                    }
                }
                Transport::Local(sink) => sink.set_resource(&resource),
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
        self.accept.flush();
        let result = if self.waiting.is_empty() && self.in_flight.is_none() {
            match &self.sink {
                Transport::Local(sink) => sink.flush(),
                Transport::Remote(..) => Ok(()),
            }
        } else {
            Err(OTelSdkError::Timeout(Duration::ZERO))
        };
        let _ = drain.reply.send(result);
    }

    /// Units not yet delivered: waiting, and in the export in progress.
    fn left(&self) -> u64 {
        let in_flight = self.in_flight.as_ref().map_or(0, |f| units::<S>(&*f.items));
        units::<S>(&self.waiting) + in_flight
    }

    /// Near the queue's size, gives up the oldest waiting items so that an item pushed
    /// finds room (those of an export in progress are not waiting: they may still be
    /// delivered).
    fn give_up_overflow(&mut self) {
        let limit = self.config.capacity - self.shared.room;
        let held = self.shared.held.load(Ordering::Relaxed);
        let over = held.saturating_sub(limit).min(self.waiting.len());
        if over == 0 {
            return;
        }
        let lost = units::<S>(self.waiting.range(..over));
        self.waiting.drain(..over);
        self.shared.held.fetch_sub(over, Ordering::Relaxed);
        let health = &self.shared.health;
        health.lost(lost, health.overflow_reason());
    }

    /// Starts (remote) or performs (local) one export of the oldest waiting items.
    fn try_export(&mut self, now: Instant) {
        if self.in_flight.is_some() || self.retry_at.is_some_and(|at| now < at) {
            return;
        }
        let most = match self.sink {
            Transport::Remote(..) => most_in_flight(&self.config),
            Transport::Local(_) => self.config.batch,
        };
        let count = self.waiting.len().min(most);
        if count == 0 {
            return;
        }
        let items: Arc<Vec<A::Item>> = Arc::new(self.waiting.drain(..count).collect());
        // No longer waiting: counted again if they come back after a failure.
        self.shared.held.fetch_sub(count, Ordering::Relaxed);
        match &self.sink {
            Transport::Remote(sink, runtime) => {
                let shared = Arc::clone(&items);
                let sink = Arc::clone(sink);
                let result = runtime.spawn(async move { sink.send(shared).await });
                self.in_flight = Some(InFlight { items, result });
            }
            Transport::Local(sink) => {
                let total = units::<S>(&*items);
                let result = crate::export::block_on(None, sink.send(items));
                // A local write that fails (disk full) is not retried: the items are lost.
                let health = &self.shared.health;
                match result {
                    Ok(()) => health.delivered(total),
                    Err(Undelivered {
                        delivered, error, ..
                    }) => {
                        // The items are gone; only their count by position is known.
                        let done = total.min(delivered as u64);
                        health.delivered(done);
                        health.lost(total - done, &error.to_string());
                    }
                }
            }
        }
    }

    /// Looks at the export in progress: delivered items leave the buffer; a failure keeps
    /// the rest and schedules a retry, or counts them lost when they may not be retried.
    fn poll_in_flight(&mut self) {
        if !self
            .in_flight
            .as_ref()
            .is_some_and(|f| f.result.is_finished())
        {
            return;
        }
        let Some(InFlight { items, result }) = self.in_flight.take() else {
            return;
        };
        let result = crate::export::block_on(None, result).unwrap_or_else(|panic| {
            // A panicking sink is retried like a failed one.
            Err(Undelivered::retry(panic))
        });
        let health = &self.shared.health;
        let Err(Undelivered {
            delivered,
            retry,
            error,
        }) = result
        else {
            health.delivered(units::<S>(&*items));
            self.retry_at = None;
            self.backoff = self.config.backoff;
            return;
        };
        let mut items = match Arc::try_unwrap(items) {
            Ok(items) => items,
            Err(shared) => {
                // The finished task dropped its reference; were it still held, the items
                // could not be taken back.
                health.lost(units::<S>(&*shared), &error.to_string());
                return;
            }
        };
        let rest = items.split_off(delivered.min(items.len()));
        health.delivered(units::<S>(&items));
        drop(items);
        let reason = error.to_string();
        if !retry {
            health.lost(units::<S>(&rest), &reason);
            return;
        }
        health.failed(&reason);
        self.retry_at = Some(Instant::now() + self.backoff);
        self.backoff = (self.backoff * 2).min(self.config.max_backoff);
        // Back in front, in order: they are still the oldest.
        self.shared.held.fetch_add(rest.len(), Ordering::Relaxed);
        for item in rest.into_iter().rev() {
            self.waiting.push_front(item);
        }
        self.give_up_overflow();
    }

    /// Answers the shutdown: what is left is counted lost and the sink shut down.
    fn finish_shutdown(&mut self, drain: Drain) {
        self.accept.flush();
        let left = self.left();
        if let Some(in_flight) = self.in_flight.take() {
            in_flight.result.abort();
        }
        self.shared
            .held
            .fetch_sub(self.waiting.len(), Ordering::Relaxed);
        let health = &self.shared.health;
        health.lost_at_shutdown(left);
        self.waiting.clear();
        let result = match &mut self.sink {
            Transport::Local(sink) => sink.shutdown(),
            Transport::Remote(sink, _) => match Arc::get_mut(sink) {
                Some(sink) => sink.shutdown(),
                None => Ok(()),
            },
        };
        let _ = drain.reply.send(result);
    }
}

//! A bounded span queue with its own export thread.
//!
//! `on_end` runs on the training thread: it only pushes onto a channel, and when the queue
//! already holds `capacity` spans it drops the span and counts it. The export thread sends
//! batches when they are full, every `delay`, on flush and at shutdown.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use opentelemetry::Context;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::trace::{Span, SpanData, SpanExporter, SpanProcessor};
use opentelemetry_sdk::Resource;

use super::health::ExportHealth;
use super::tap::SpanTap;
use crate::runlog::SpanRecord;

/// Queue sizes: large enough for bursts of short steps, small enough to bound memory.
#[derive(Debug, Clone, Copy)]
pub(crate) struct QueueConfig {
    pub(crate) capacity: usize,
    pub(crate) batch: usize,
    pub(crate) delay: Duration,
}

impl Default for QueueConfig {
    fn default() -> Self {
        Self {
            capacity: 8192,
            batch: 512,
            delay: Duration::from_secs(1),
        }
    }
}

enum Message {
    Span(Box<SpanData>),
    Resource(Resource),
    Flush(mpsc::SyncSender<OTelSdkResult>),
    Shutdown(mpsc::SyncSender<OTelSdkResult>),
}

/// The span processor: a channel to the export thread.
#[derive(Debug)]
pub(crate) struct QueueProcessor {
    sender: Mutex<Option<mpsc::Sender<Message>>>,
    queued: Arc<AtomicUsize>,
    capacity: usize,
    health: Arc<ExportHealth>,
    thread: Mutex<Option<JoinHandle<()>>>,
    closed: AtomicBool,
}

impl QueueProcessor {
    /// Starts the export thread. `runtime` drives exporters that need tokio (OTLP).
    pub(crate) fn start<E: SpanExporter + 'static>(
        exporter: E,
        runtime: Option<tokio::runtime::Handle>,
        config: QueueConfig,
        health: Arc<ExportHealth>,
        taps: Vec<Box<dyn SpanTap>>,
    ) -> std::io::Result<Self> {
        let (sender, receiver) = mpsc::channel();
        let queued = Arc::new(AtomicUsize::new(0));
        let mut worker = Worker {
            exporter,
            runtime,
            config,
            queued: Arc::clone(&queued),
            health: Arc::clone(&health),
            batch: Vec::with_capacity(config.batch),
            taps,
        };
        let thread = std::thread::Builder::new()
            .name("gpuspan-spans".into())
            .spawn(move || worker.run(&receiver))?;
        Ok(Self {
            sender: Mutex::new(Some(sender)),
            queued,
            capacity: config.capacity,
            health,
            thread: Mutex::new(Some(thread)),
            closed: AtomicBool::new(false),
        })
    }

    fn send(&self, message: Message) -> bool {
        match self.sender.lock() {
            Ok(sender) => sender.as_ref().is_some_and(|s| s.send(message).is_ok()),
            Err(_) => false,
        }
    }

    fn request(
        &self,
        make: impl FnOnce(mpsc::SyncSender<OTelSdkResult>) -> Message,
        timeout: Duration,
    ) -> OTelSdkResult {
        let (reply, answer) = mpsc::sync_channel(1);
        if !self.send(make(reply)) {
            return Err(OTelSdkError::AlreadyShutdown);
        }
        answer
            .recv_timeout(timeout)
            .map_err(|_| OTelSdkError::Timeout(timeout))?
    }
}

impl SpanProcessor for QueueProcessor {
    fn on_start(&self, _span: &mut Span, _cx: &Context) {}

    fn on_end(&self, span: SpanData) {
        if !span.span_context.is_sampled() {
            return;
        }
        if self.closed.load(Ordering::Relaxed) {
            self.health.lost(1, "the span ended after shutdown");
            return;
        }
        if self.queued.fetch_add(1, Ordering::Relaxed) >= self.capacity {
            self.queued.fetch_sub(1, Ordering::Relaxed);
            self.health.lost(
                1,
                "the export queue is full (the destination is slower than the spans come)",
            );
            return;
        }
        if !self.send(Message::Span(Box::new(span))) {
            self.queued.fetch_sub(1, Ordering::Relaxed);
            self.health.lost(1, "the export thread has stopped");
        }
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.request(Message::Flush, Duration::from_secs(30))
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        if self.closed.swap(true, Ordering::Relaxed) {
            return Err(OTelSdkError::AlreadyShutdown);
        }
        let result = self.request(Message::Shutdown, timeout);
        if let Ok(mut sender) = self.sender.lock() {
            sender.take();
        }
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

/// The export thread's state.
struct Worker<E> {
    exporter: E,
    runtime: Option<tokio::runtime::Handle>,
    config: QueueConfig,
    queued: Arc<AtomicUsize>,
    health: Arc<ExportHealth>,
    batch: Vec<SpanData>,
    taps: Vec<Box<dyn SpanTap>>,
}

impl<E: SpanExporter> Worker<E> {
    /// Queues one span for export, after every tap has seen it.
    fn accept(&mut self, mut span: SpanData) {
        if !self.taps.is_empty() {
            let record = SpanRecord::from_span_data(&span);
            for tap in &mut self.taps {
                tap.on_span(&mut span, &record);
            }
        }
        self.batch.push(span);
    }

    fn run(&mut self, receiver: &mpsc::Receiver<Message>) {
        let mut deadline = Instant::now() + self.config.delay;
        loop {
            let wait = deadline.saturating_duration_since(Instant::now());
            match receiver.recv_timeout(wait) {
                Ok(Message::Span(span)) => {
                    self.queued.fetch_sub(1, Ordering::Relaxed);
                    self.accept(*span);
                    if self.batch.len() >= self.config.batch {
                        let _ = self.export();
                    }
                }
                Ok(Message::Resource(resource)) => self.exporter.set_resource(&resource),
                Ok(Message::Flush(reply)) => {
                    let result = self.drain(receiver);
                    let result = result.and(self.exporter.force_flush());
                    let _ = reply.send(result);
                }
                Ok(Message::Shutdown(reply)) => {
                    let result = self.drain(receiver);
                    let result = result.and(self.exporter.shutdown());
                    let _ = reply.send(result);
                    return;
                }
                Err(RecvTimeoutError::Timeout) => {
                    let _ = self.export();
                    deadline = Instant::now() + self.config.delay;
                }
                Err(RecvTimeoutError::Disconnected) => {
                    let _ = self.export();
                    return;
                }
            }
        }
    }

    /// Exports what is queued now, in batches.
    fn drain(&mut self, receiver: &mpsc::Receiver<Message>) -> OTelSdkResult {
        let mut result = Ok(());
        while let Ok(message) = receiver.try_recv() {
            if let Message::Span(span) = message {
                self.queued.fetch_sub(1, Ordering::Relaxed);
                self.accept(*span);
                if self.batch.len() >= self.config.batch {
                    result = result.and(self.export());
                }
            }
        }
        let result = result.and(self.export());
        for tap in &mut self.taps {
            tap.flush();
        }
        result
    }

    fn export(&mut self) -> OTelSdkResult {
        if self.batch.is_empty() {
            return Ok(());
        }
        let spans = std::mem::replace(&mut self.batch, Vec::with_capacity(self.config.batch));
        let count = spans.len() as u64;
        let result = super::block_on(self.runtime.as_ref(), self.exporter.export(spans));
        if let Err(error) = &result {
            self.health.lost(count, &error.to_string());
        }
        result
    }
}

//! The span processor: the SDK's spans through the export queue.
//!
//! `on_end` runs on the training thread: it takes the span's memory figures handed over by
//! the layer, and pushes both onto the queue. Nothing else happens there: no I/O, no lock
//! but the channel's, no write to stderr.
//!
//! On the queue's thread, [`SpanIntake`] turns figures into attributes and passes every
//! span through the taps (summary, durations, diagnosis, pictures) before it waits for the
//! exporter; see [`super::queue`] for the buffering, retries and accounting.

use std::sync::Arc;
use std::time::Duration;

use opentelemetry::Context;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{Span, SpanData, SpanExporter, SpanProcessor};
use opentelemetry_sdk::Resource;

use super::health::ExportHealth;
use super::queue::{Accept, Backlog, Queue, QueueConfig, Transport};
use super::returns::{Returned, Returns};
use super::sink::Exporter;
use super::tap::SpanTap;
use crate::figures::energy::EnergyContext;
use crate::figures::{Attr, DeviceNames, Reading, RecordBuilder, SpanEnergy, SpanFigures};
use crate::names::attribute as attr;
use crate::sampler::Shared;

/// The span processor: a queue to the export thread.
#[derive(Debug)]
pub(crate) struct QueueProcessor {
    queue: Queue<SpanData, Option<SpanFigures>>,
    returns: Arc<Returns>,
    flush_timeout: Duration,
}

impl QueueProcessor {
    /// Starts the export thread.
    pub(crate) fn start<E: SpanExporter + 'static>(
        sink: Transport<E>,
        config: QueueConfig,
        health: Arc<ExportHealth>,
        taps: Vec<Box<dyn SpanTap>>,
        flush_timeout: Duration,
        shared: Arc<Shared>,
    ) -> std::io::Result<Self> {
        let returns = Arc::new(Returns::default());
        let shared_threshold = shared.throttle_threshold();
        let intake = SpanIntake {
            taps,
            shared,
            returns: Arc::clone(&returns),
            returned: Vec::new(),
            attributes: Vec::new(),
            throttle_threshold: shared_threshold,
        };
        let queue = Queue::start("gpuspan-spans", sink.map(Exporter), intake, config, health)?;
        Ok(Self {
            queue,
            returns,
            flush_timeout,
        })
    }

    /// Spans ended but not yet through the taps.
    pub(crate) fn backlog(&self) -> Backlog {
        self.queue.backlog()
    }
}

impl SpanProcessor for QueueProcessor {
    fn on_start(&self, _span: &mut Span, _cx: &Context) {}

    fn on_end(&self, span: SpanData) {
        let figures = crate::layer::closing();
        self.returns.free_some();
        if !span.span_context.is_sampled() || crate::layer::discarding() {
            return;
        }
        self.queue.push(span, figures, 1);
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.queue.flush(self.flush_timeout)
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.queue.shutdown(timeout)
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.queue.set_resource(resource.clone());
    }
}

/// The export thread's work on each span before it waits for the exporter.
struct SpanIntake {
    taps: Vec<Box<dyn SpanTap>>,
    /// The sampler's device list and keys, held here rather than by every span: a count
    /// shared by the training thread and this one would move between their cores twice
    /// per span.
    shared: Arc<Shared>,
    /// Replaced attribute lists go back to be freed where they were allocated.
    returns: Arc<Returns>,
    returned: Vec<Returned>,
    /// This span's memory attributes, before they join its own in a list of their size.
    attributes: Vec<opentelemetry::KeyValue>,
    /// The share of throttled readings from which a span gets `gpu.throttled`.
    throttle_threshold: f64,
}

impl Accept for SpanIntake {
    type Input = SpanData;
    type Extra = Option<SpanFigures>;
    type Item = SpanData;

    /// Adds the span's memory attributes and shows it to every tap.
    fn accept(&mut self, mut span: SpanData, figures: Option<SpanFigures>) -> SpanData {
        let mut record = (!self.taps.is_empty()).then(|| RecordBuilder::from_span_data(&span));
        if let Some(mut figures) = figures {
            // Allocator peaks the program recorded on the span itself (the Python package's
            // exact per-span peaks) win over the pushed counters' watermark.
            let has = |key: &str| span.attributes.iter().any(|kv| kv.key.as_str() == key);
            if figures.allocated_peak.is_some() && has(attr::GPU_ALLOCATOR_ALLOCATED_PEAK) {
                figures.allocated_peak = Reading::NONE;
            }
            if figures.reserved_peak.is_some() && has(attr::GPU_ALLOCATOR_RESERVED_PEAK) {
                figures.reserved_peak = Reading::NONE;
            }
            // A new list made here: growing the one the training thread allocated would
            // take that thread's allocator lock from this one; the old one goes back there.
            let devices = DeviceNames {
                source: self.shared.source(),
                keys: self.shared.all_device_keys(),
                ids: self.shared.device_ids(),
            };
            self.attributes.clear();
            figures.write(&devices, &mut self.attributes, record.as_mut());
            if let Some(watermark) = figures.power.0.take() {
                let energy = watermark.energy();
                self.shared.recycle_watermark(watermark);
                if let Some(energy) = energy {
                    let from = self.attributes.len();
                    let throttled = self.energy(&mut span, &energy);
                    if let Some(record) = record.as_mut() {
                        for kv in &self.attributes[from..] {
                            record.read(kv.key.as_str(), Attr::of_value(&kv.value));
                        }
                        if throttled {
                            record.mark_throttled();
                        }
                    }
                }
            }
            // Sized exactly: a list the allocator can hand back as it was freed.
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
        if let Some(record) = record {
            let record = record.finish();
            each_tap(&mut self.taps, |tap| tap.on_span(&mut span, &record));
        }
        span
    }

    fn flush(&mut self) {
        each_tap(&mut self.taps, |tap| tap.flush());
    }
}

impl SpanIntake {
    /// Adds the span's energy and throttle attributes, and its `gpu.throttled` event when
    /// the clocks were held down for more than the threshold's share of it; whether it got
    /// that event.
    fn energy(&mut self, span: &mut SpanData, energy: &SpanEnergy) -> bool {
        let batch_size = span
            .attributes
            .iter()
            .find(|kv| kv.key.as_str() == attr::BATCH_SIZE)
            .and_then(|kv| match kv.value {
                opentelemetry::Value::I64(v) => Some(v),
                _ => None,
            });
        let context = EnergyContext {
            duration: span
                .end_time
                .duration_since(span.start_time)
                .unwrap_or_default(),
            batch_size,
            counter_period: self.shared.energy_period(),
            scope: self.shared.energy_scope(),
            device_keys: self.shared.energy_keys(),
        };
        energy.write(&context, &mut self.attributes);
        let throttled = energy
            .throttle_share()
            .is_some_and(|share| share > 0.0 && share >= self.throttle_threshold);
        if throttled {
            let mut attributes = Vec::with_capacity(3);
            energy.throttle_attributes(&mut attributes);
            span.events.events.push(opentelemetry::trace::Event::new(
                crate::names::clock_event::THROTTLED,
                span.end_time,
                attributes,
                0,
            ));
        }
        throttled
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

#[cfg(test)]
mod tests;

//! OTel instruments: the hardware semantic conventions for GPUs (`hw.gpu.*`, `hw.type =
//! gpu`), the per-interval peak, host memory, and step and epoch durations.
//!
//! Observable instruments read what the sampler already holds: a collection never touches
//! a device.

use std::sync::Arc;
use std::time::Duration;

use opentelemetry::metrics::{Histogram, Meter};
use opentelemetry::KeyValue;

use crate::figures::{device_attributes, int};
use crate::names::{attribute as attr, metric};
use crate::record::{Role, SpanRecord};
use crate::sampler::{figure, Call, SelfMeter, Shared};

/// Bucket bounds in seconds for step and epoch durations: milliseconds to an hour.
const DURATION_BOUNDS: [f64; 20] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
    120.0, 300.0, 600.0, 1800.0, 3600.0,
];

/// Registers every observable instrument on `meter`. Their callbacks live as long as the
/// meter provider. `gpu.memory.peak` reads a peak window of this meter's own, so two
/// readers (an OTLP export and a Prometheus scrape) do not reset each other's peak.
pub(crate) fn register_gauges(meter: &Meter, shared: &Arc<Shared>) {
    let devices: Arc<[Vec<KeyValue>]> = shared
        .devices()
        .iter()
        .map(|device| {
            let mut attributes = vec![
                KeyValue::new(attr::HW_ID, device.uuid.clone()),
                KeyValue::new(attr::HW_NAME, device.name.clone()),
                KeyValue::new(attr::HW_VENDOR, device.vendor.clone()),
                KeyValue::new(attr::HW_TYPE, "gpu"),
            ];
            attributes.extend(device_attributes(device.id()));
            attributes
        })
        .collect();

    if !devices.is_empty() {
        let (s, d) = (Arc::clone(shared), Arc::clone(&devices));
        meter
            .i64_observable_up_down_counter(metric::HW_GPU_MEMORY_USAGE)
            .with_unit("By")
            .with_description("GPU memory in use (NVML used)")
            .with_callback(move |observer| {
                for (i, attributes) in d.iter().enumerate() {
                    if let Some(used) = value(s.latest(figure::DEVICE0 + i)) {
                        observer.observe(used, attributes);
                    }
                }
            })
            .build();

        let (s, d) = (Arc::clone(shared), Arc::clone(&devices));
        meter
            .i64_observable_up_down_counter(metric::HW_GPU_MEMORY_LIMIT)
            .with_unit("By")
            .with_description("GPU memory installed")
            .with_callback(move |observer| {
                for (i, attributes) in d.iter().enumerate() {
                    if let Some(total) = value(s.total(i)) {
                        observer.observe(total, attributes);
                    }
                }
            })
            .build();

        let (s, d) = (Arc::clone(shared), Arc::clone(&devices));
        meter
            .f64_observable_gauge(metric::HW_GPU_MEMORY_UTILIZATION)
            .with_unit("1")
            .with_description("Fraction of GPU memory in use (usage / limit)")
            .with_callback(move |observer| {
                for (i, attributes) in d.iter().enumerate() {
                    let used = value(s.latest(figure::DEVICE0 + i));
                    let total = value(s.total(i)).filter(|&t| t > 0);
                    if let (Some(used), Some(total)) = (used, total) {
                        observer.observe(used as f64 / total as f64, attributes);
                    }
                }
            })
            .build();

        let (s, d) = (Arc::clone(shared), Arc::clone(&devices));
        meter
            .f64_observable_gauge(metric::HW_GPU_UTILIZATION)
            .with_unit("1")
            .with_description("Fraction of time the GPU was busy")
            .with_callback(move |observer| {
                for (i, attributes) in d.iter().enumerate() {
                    if let Some(busy) = s.utilization(i) {
                        let mut attributes = attributes.clone();
                        attributes.push(KeyValue::new(attr::HW_GPU_TASK, "general"));
                        observer.observe(busy, &attributes);
                    }
                }
            })
            .build();

        if shared.power_base().is_some() {
            let (s, d) = (Arc::clone(shared), Arc::clone(&devices));
            meter
                .f64_observable_counter(metric::HW_ENERGY)
                .with_unit("J")
                .with_description("Energy the GPU drew since gpuspan started reading it")
                .with_callback(move |observer| {
                    for (i, attributes) in d.iter().enumerate() {
                        if let Some(uj) = s.device_energy(i) {
                            observer.observe(uj as f64 / 1e6, attributes);
                        }
                    }
                })
                .build();
            let (s, d) = (Arc::clone(shared), Arc::clone(&devices));
            meter
                .f64_observable_gauge(metric::HW_POWER)
                .with_unit("W")
                .with_description("Power the GPU draws")
                .with_callback(move |observer| {
                    for (i, attributes) in d.iter().enumerate() {
                        if let Some(mw) = s.device_power(i) {
                            observer.observe(mw as f64 / 1000.0, attributes);
                        }
                    }
                })
                .build();
        }

        let (s, d) = (Arc::clone(shared), Arc::clone(&devices));
        let window = shared.register_peak_window();
        meter
            .i64_observable_gauge(metric::GPU_MEMORY_PEAK)
            .with_unit("By")
            .with_description(
                "Highest GPU memory in use since the previous collection, from every sample",
            )
            .with_callback(move |observer| {
                for (i, attributes) in d.iter().enumerate() {
                    if let Some(peak) = value(s.take_peak(&window, i)) {
                        observer.observe(peak, attributes);
                    }
                }
            })
            .build();
    }

    let s = Arc::clone(shared);
    meter
        .i64_observable_gauge(metric::PROCESS_MEMORY_USAGE)
        .with_unit("By")
        .with_description("Resident host memory of this process")
        .with_callback(move |observer| {
            if let Some(rss) = value(s.latest(figure::HOST_RSS)) {
                observer.observe(rss, &[]);
            }
        })
        .build();
}

/// `ml.step.duration` and `ml.epoch.duration` of every meter provider, fed from closed
/// spans on the export thread.
#[derive(Debug, Default)]
pub(crate) struct Durations {
    step: Vec<Histogram<f64>>,
    epoch: Vec<Histogram<f64>>,
}

impl Durations {
    /// Adds the two histograms on `meter`.
    pub(crate) fn register(&mut self, meter: &Meter) {
        let histogram = |name: &'static str, description: &'static str| {
            meter
                .f64_histogram(name)
                .with_unit("s")
                .with_description(description)
                .with_boundaries(DURATION_BOUNDS.to_vec())
                .build()
        };
        self.step.push(histogram(
            metric::ML_STEP_DURATION,
            "Duration of training steps",
        ));
        self.epoch.push(histogram(
            metric::ML_EPOCH_DURATION,
            "Duration of training epochs",
        ));
    }
}

impl crate::export::tap::SpanTap for Durations {
    fn on_span(&mut self, _span: &mut opentelemetry_sdk::trace::SpanData, record: &SpanRecord) {
        let histograms = match record.role {
            Role::Step(_) => &self.step,
            Role::Epoch(_) => &self.epoch,
            Role::Other => return,
        };
        let seconds = record.seconds();
        for histogram in histograms {
            histogram.record(seconds, &[]);
        }
    }
}

/// Bucket bounds in seconds for the sampler's driver calls and intervals: a microsecond
/// (a memory read) to a second (a hung driver).
const SAMPLER_BOUNDS: [f64; 19] = [
    1e-6, 2.5e-6, 5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2,
    5e-2, 0.1, 0.25, 0.5, 1.0,
];

/// The sampler's own instruments on every meter provider: `gpuspan.sampler.read.duration`
/// and `gpuspan.sampler.interval`, fed from the sampler's threads (see [`SelfMeter`]), and
/// `gpuspan.sampler.missed_ticks`, read from what the sampler counts.
#[derive(Debug, Default)]
pub(crate) struct SamplerInstruments {
    reads: Vec<Histogram<f64>>,
    intervals: Vec<Histogram<f64>>,
    /// `gpuspan.sampler.call` of each kind, made once.
    calls: Vec<[KeyValue; 1]>,
}

impl SamplerInstruments {
    /// Adds the instruments on `meter`.
    pub(crate) fn register(&mut self, meter: &Meter, shared: &Arc<Shared>) {
        let histogram = |name: &'static str, description: &'static str| {
            meter
                .f64_histogram(name)
                .with_unit("s")
                .with_description(description)
                .with_boundaries(SAMPLER_BOUNDS.to_vec())
                .build()
        };
        self.reads.push(histogram(
            metric::GPUSPAN_SAMPLER_READ_DURATION,
            "How long each driver call of gpuspan's sampler took, per kind of call",
        ));
        self.intervals.push(histogram(
            metric::GPUSPAN_SAMPLER_INTERVAL,
            "Time between two readings of device memory, as achieved",
        ));
        self.calls = Call::ALL
            .iter()
            .map(|call| [KeyValue::new(attr::GPUSPAN_SAMPLER_CALL, call.name())])
            .collect();
        let s = Arc::clone(shared);
        meter
            .u64_observable_counter(metric::GPUSPAN_SAMPLER_MISSED_TICKS)
            .with_unit("{tick}")
            .with_description("Readings of device memory the sampler could not take on schedule")
            .with_callback(move |observer| observer.observe(s.missed_ticks(), &[]))
            .build();
    }
}

impl SelfMeter for SamplerInstruments {
    fn read(&self, call: Call, took: Duration) {
        let position = Call::ALL.iter().position(|c| *c == call).unwrap_or(0);
        let Some(attributes) = self.calls.get(position) else {
            return;
        };
        for histogram in &self.reads {
            histogram.record(took.as_secs_f64(), attributes);
        }
    }

    fn interval(&self, gap: Duration) {
        for histogram in &self.intervals {
            histogram.record(gap.as_secs_f64(), &[]);
        }
    }
}

fn value(reading: Option<u64>) -> Option<i64> {
    reading.map(int)
}

//! What the sampler publishes and every other thread reads: the latest figures, the
//! totals, the open spans' watermarks and the metric readers' peak windows.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use super::driver_check::DriverCheck;
use super::figure;
use super::meter::{Call, SelfMeter};
use super::watermarks::{Watermarks, FREE_WATERMARKS};
use crate::figures::{AtomicReading, Reading, SpanPower, Watermark};
use crate::record::GpuId;
use crate::source::Device;
use crate::util::sync::lock;

/// State shared between the sampler thread, open spans and metric callbacks.
#[derive(Debug)]
pub(crate) struct Shared {
    /// Shared with every span's `gpu.memory.source` without a copy.
    pub(super) source_name: std::sync::Arc<str>,
    pub(super) devices: Vec<Device>,
    /// `gpu.<i>.memory.start` / `.end` / `.peak` of every device, made once.
    pub(super) device_keys: Vec<[opentelemetry::Key; 3]>,
    pub(super) device_ids: Vec<GpuId>,
    pub(super) latest: Box<[AtomicReading]>,
    pub(super) totals: Box<[AtomicReading]>,
    /// `f64` bits.
    pub(super) utilization: Box<[AtomicReading]>,
    /// Peak windows registered by metric readers: each reader has its own, so a Prometheus
    /// scrape does not reset the peak an OTLP export is about to report.
    pub(super) peak_windows: Mutex<Vec<Arc<PeakWindow>>>,
    /// Bit `i` set: device `i` failed its last read.
    pub(super) failing: AtomicU64,
    pub(super) last_errors: Mutex<Vec<Option<String>>>,
    pub(super) watermarks: Mutex<Watermarks>,
    /// Spans stop registering watermarks once gpuspan shuts down.
    pub(super) closed: AtomicBool,
    pub(super) interval: Duration,
    pub(super) ticks: AtomicU64,
    pub(super) max_gap_ns: AtomicU64,
    /// Scheduled readings the sampler could not take in time.
    pub(super) missed_ticks: AtomicU64,
    /// From the first reading to the latest.
    pub(super) elapsed_ns: AtomicU64,
    /// The widest interval device memory was read at, when wider than asked.
    pub(super) widened_ns: AtomicReading,
    /// What one round of memory reads costs, as planned with.
    pub(super) memory_cost_ns: AtomicU64,
    /// Process lists taken, how often each device is listed, and what a round of lists
    /// costs (not measured without lists).
    pub(super) process_lists: AtomicU64,
    pub(super) process_every_ns: AtomicReading,
    pub(super) process_cost_ns: AtomicReading,
    /// Where the sampler's measurements of itself go, once the meters exist.
    meter: OnceLock<Box<dyn SelfMeter>>,
    /// The process peaks held against the driver's accounting, as the run ended.
    pub(super) driver_check: Mutex<Vec<DriverCheck>>,
    /// Where the power totals start in `latest`, when the source reads them.
    power_base: Option<usize>,
    /// `gpu.<i>.energy` of every device, made once.
    energy_keys: Vec<opentelemetry::Key>,
    /// What the energy covers beyond the devices (`gpu.energy.scope`).
    energy_scope: Option<&'static str>,
    /// The latest time between two moves of the energy counters, in ns.
    pub(super) energy_period_ns: AtomicReading,
    /// The share of throttled readings from which a span gets `gpu.throttled`.
    pub(super) throttle_threshold: f64,
    /// Each device's latest power reading, in mW.
    pub(super) power_mw: Box<[AtomicReading]>,
}

/// `gpu.<id>.memory.start` / `.end` / `.peak`, made once per device for the life of the
/// process: static keys cost nothing to copy onto every span and to drop (a shared string
/// would cost two atomic operations per key per span).
pub(super) fn device_keys(id: GpuId) -> [&'static str; 3] {
    static KEYS: Mutex<Vec<(GpuId, [&'static str; 3])>> = Mutex::new(Vec::new());
    let mut keys = lock(&KEYS);
    if let Some((_, made)) = keys.iter().find(|(made_for, _)| *made_for == id) {
        return *made;
    }
    let made = crate::figures::device_keys(id).map(|key| &*Box::leak(key.into_boxed_str()));
    keys.push((id, made));
    made
}

/// A metric reader's `gpu.memory.peak` window: per device, the highest reading since the
/// reader last collected.
#[derive(Debug)]
pub(crate) struct PeakWindow(pub(super) Box<[AtomicReading]>);

/// How the sampler kept up with its schedule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SamplerStats {
    /// Readings taken since the sampler started.
    pub samples: u64,
    /// The interval the sampler was asked to keep.
    pub interval: Duration,
    /// The longest time between two readings. Above twice the interval, a short spike may
    /// have been missed (the machine was too busy to run the sampler on time).
    pub max_gap: Duration,
    /// Scheduled readings that could not be taken in time.
    pub missed_ticks: u64,
    /// The mean time between two readings, once there were two.
    pub achieved_interval: Option<Duration>,
    /// The widest interval device memory was read at, when reading it was too slow for the
    /// interval asked.
    pub widened_interval: Option<Duration>,
    /// What reading every device's memory once costs (the least of the latest rounds).
    pub memory_read: Duration,
    /// How often each device's process list is read, when the source lists processes
    /// apart from device memory.
    pub process_interval: Option<Duration>,
    /// What listing every device's processes once costs.
    pub process_read: Option<Duration>,
    /// Process lists taken.
    pub process_lists: u64,
    /// This process's peak on each device by the process lists, against the driver's
    /// accounting, as the run ended (empty before, or when the source lists no
    /// processes).
    pub driver_check: Vec<DriverCheck>,
}

impl Shared {
    pub(crate) fn new(source_name: String, devices: Vec<Device>, interval: Duration) -> Self {
        let n = devices.len();
        let atomics = |len: usize| (0..len).map(|_| AtomicReading::none()).collect();
        let device_keys = devices
            .iter()
            .map(|device| device_keys(device.id()).map(opentelemetry::Key::from_static_str))
            .collect();
        Self {
            source_name: source_name.into(),
            device_ids: devices.iter().map(Device::id).collect(),
            device_keys,
            latest: atomics(figure::DEVICE0 + n),
            totals: atomics(n),
            utilization: atomics(n),
            peak_windows: Mutex::new(Vec::new()),
            failing: AtomicU64::new(0),
            last_errors: Mutex::new(vec![None; n]),
            watermarks: Mutex::new(Watermarks::default()),
            closed: AtomicBool::new(false),
            devices,
            interval,
            ticks: AtomicU64::new(0),
            max_gap_ns: AtomicU64::new(0),
            missed_ticks: AtomicU64::new(0),
            elapsed_ns: AtomicU64::new(0),
            widened_ns: AtomicReading::none(),
            memory_cost_ns: AtomicU64::new(0),
            process_lists: AtomicU64::new(0),
            process_every_ns: AtomicReading::none(),
            process_cost_ns: AtomicReading::none(),
            meter: OnceLock::new(),
            driver_check: Mutex::new(Vec::new()),
            power_base: None,
            energy_keys: Vec::new(),
            energy_scope: None,
            energy_period_ns: AtomicReading::none(),
            throttle_threshold: crate::figures::energy::DEFAULT_THROTTLE_THRESHOLD,
            power_mw: atomics(n),
        }
    }

    /// Makes room for the power totals (`slots` figures after the per-device ones): the
    /// source reads energy, power or clocks. Before the sampler starts.
    pub(super) fn read_power(&mut self, slots: usize, scope: Option<&'static str>) {
        let base = self.latest.len();
        self.latest = (0..base + slots).map(|_| AtomicReading::none()).collect();
        self.power_base = Some(base);
        self.energy_scope = scope;
        self.energy_keys = self
            .device_ids
            .iter()
            .map(|&id| {
                opentelemetry::Key::from(format!(
                    "{}{id}{}",
                    crate::names::attribute::GPU_DEVICE_PREFIX,
                    crate::names::attribute::GPU_DEVICE_ENERGY_SUFFIX
                ))
            })
            .collect();
    }

    /// Where the power totals start among the figures, when the source reads them.
    pub(crate) fn power_base(&self) -> Option<usize> {
        self.power_base
    }

    /// `gpu.<i>.energy` of every device in scope (empty without power figures).
    pub(crate) fn energy_keys(&self) -> &[opentelemetry::Key] {
        &self.energy_keys
    }

    /// What the energy figures cover beyond the devices (`gpu.energy.scope`).
    pub(crate) fn energy_scope(&self) -> Option<&'static str> {
        self.energy_scope
    }

    /// The energy device `i` drew since the sampler started, in µJ, when its counter is
    /// read.
    pub(crate) fn device_energy(&self, device: usize) -> Option<u64> {
        let base = self.power_base?;
        self.reading(base + super::figure::power::DEVICE_ENERGY0 + device)
            .get()
    }

    /// Device `i`'s latest power reading, in mW.
    pub(crate) fn device_power(&self, device: usize) -> Option<u64> {
        self.power_mw.get(device)?.load().get()
    }

    /// The share of throttled readings from which a span gets `gpu.throttled`.
    pub(crate) fn throttle_threshold(&self) -> f64 {
        self.throttle_threshold
    }

    /// The latest time between two moves of the energy counters, once seen.
    pub(crate) fn energy_period(&self) -> Option<Duration> {
        self.energy_period_ns.load().get().map(Duration::from_nanos)
    }

    /// Sends the sampler's measurements of itself to `meter` from now on (once).
    pub(crate) fn set_meter(&self, meter: Box<dyn SelfMeter>) {
        let _ = self.meter.set(meter);
    }

    /// One driver call of `call` took `took`.
    pub(super) fn meter(&self, call: Call, took: Duration) {
        if let Some(meter) = self.meter.get() {
            meter.read(call, took);
        }
    }

    /// Two readings came `gap` apart.
    pub(super) fn meter_interval(&self, gap: Duration) {
        if let Some(meter) = self.meter.get() {
            meter.interval(gap);
        }
    }

    /// Scheduled readings missed so far.
    pub(crate) fn missed_ticks(&self) -> u64 {
        self.missed_ticks.load(Ordering::Relaxed)
    }

    /// `nvml`, `nvidia-smi`, or `none`.
    pub(crate) fn source_name(&self) -> &str {
        &self.source_name
    }

    /// The source name, shared with every span's attribute.
    pub(crate) fn source(&self) -> &std::sync::Arc<str> {
        &self.source_name
    }

    /// Devices in scope, in reading order.
    pub(crate) fn devices(&self) -> &[Device] {
        &self.devices
    }

    /// Every device in scope, in reading order.
    pub(crate) fn device_ids(&self) -> &[GpuId] {
        &self.device_ids
    }

    /// The attribute keys of every device in scope: start, end, peak.
    pub(crate) fn all_device_keys(&self) -> &[[opentelemetry::Key; 3]] {
        &self.device_keys
    }

    /// The latest reading of a figure, as a span's figures keep it.
    pub(crate) fn reading(&self, figure: usize) -> Reading {
        self.latest[figure].load()
    }

    /// The latest reading of a figure, if it was measured.
    pub(crate) fn latest(&self, figure: usize) -> Option<u64> {
        self.reading(figure).get()
    }

    /// Memory installed on device `i`.
    pub(crate) fn total(&self, device: usize) -> Option<u64> {
        self.totals[device].load().get()
    }

    pub(crate) fn utilization(&self, device: usize) -> Option<f64> {
        self.utilization[device].load().get().map(f64::from_bits)
    }

    /// Registers a metric reader's own peak window, raised at every tick from now on.
    pub(crate) fn register_peak_window(&self) -> Arc<PeakWindow> {
        let window = Arc::new(PeakWindow(
            (0..self.devices.len())
                .map(|_| AtomicReading::none())
                .collect(),
        ));
        lock(&self.peak_windows).push(Arc::clone(&window));
        window
    }

    /// The highest usage of `device` since `window` was last taken, restarting the window
    /// at the latest reading.
    pub(crate) fn take_peak(&self, window: &PeakWindow, device: usize) -> Option<u64> {
        let current = self.latest[figure::DEVICE0 + device].load();
        window.0[device].swap(current).max(current).get()
    }

    /// Devices that failed their last read (bit `i`: device `i`).
    pub(crate) fn failing(&self) -> u64 {
        self.failing.load(Ordering::Relaxed)
    }

    /// The last error of each device that failed, as `gpu <index>: <message>`.
    pub(crate) fn describe_errors(&self, mask: u64) -> String {
        let errors = lock(&self.last_errors);
        let mut parts = Vec::new();
        for (i, device) in self.devices.iter().enumerate().take(64) {
            if mask & (1 << i) != 0 {
                let message = errors[i].as_deref().unwrap_or("read failed");
                parts.push(format!("gpu {}: {message}", device.id()));
            }
        }
        parts.join("; ")
    }

    /// Starts tracking a span: copies the latest figures into a watermark the sampler
    /// raises at every tick (and adds its power reads to). `None` once gpuspan has shut
    /// down (nothing would raise it).
    pub(crate) fn open_watermark(&self) -> Option<Arc<Watermark>> {
        if self.closed.load(Ordering::Relaxed) {
            return None;
        }
        let mut watermarks = lock(&self.watermarks);
        let watermark = watermarks.free.pop().unwrap_or_else(|| {
            let memory = self.power_base.unwrap_or(self.latest.len());
            Arc::new(Watermark::new(memory, self.latest.len() - memory))
        });
        watermark.open(&self.latest, self.failing.load(Ordering::Relaxed));
        if let Some(base) = self.power_base {
            use figure::power::{POWER_NOW, SM_CLOCK_LOW};
            watermark.open_power(
                self.latest[base + POWER_NOW].load(),
                self.latest[base + SM_CLOCK_LOW].load(),
            );
        }
        watermarks.open.push(Arc::clone(&watermark));
        Some(watermark)
    }

    /// Stops tracking a span whose figures were read, and hands its power figures on: the
    /// watermark itself, which the export thread reads them from and then gives back
    /// ([`Shared::recycle_watermark`]). Without power figures it goes back at once.
    ///
    /// Called by the thread that ends the span, usually the one that opens the next, so a
    /// training loop reuses one watermark per nesting level (and per span in flight to the
    /// export thread): it does not allocate one per step, and a tick raises only the spans
    /// open now.
    pub(crate) fn finish_watermark(&self, watermark: Arc<Watermark>) -> SpanPower {
        let mut watermarks = lock(&self.watermarks);
        let Watermarks { open, free } = &mut *watermarks;
        // The span that closes is most often the one opened last.
        let Some(at) = open.iter().rposition(|w| Arc::ptr_eq(w, &watermark)) else {
            // Let go at shutdown: the sampler no longer adds to it.
            return SpanPower::default();
        };
        let listed = open.swap_remove(at);
        if watermark.holds_power() {
            return SpanPower(Some(watermark));
        }
        if free.len() < FREE_WATERMARKS {
            free.push(listed);
        }
        SpanPower::default()
    }

    /// Stops tracking a span that will not be exported: its watermark goes back for reuse.
    pub(crate) fn close_watermark(&self, watermark: Arc<Watermark>) {
        if let SpanPower(Some(watermark)) = self.finish_watermark(watermark) {
            self.recycle_watermark(watermark);
        }
    }

    /// Takes back a watermark whose power figures the export thread has read.
    pub(crate) fn recycle_watermark(&self, watermark: Arc<Watermark>) {
        watermark.clear_power();
        let mut watermarks = lock(&self.watermarks);
        if !self.closed.load(Ordering::Relaxed) && watermarks.free.len() < FREE_WATERMARKS {
            watermarks.free.push(watermark);
        }
    }

    /// Spans opened from now on are not tracked, and open ones are let go.
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::Relaxed);
        let mut watermarks = lock(&self.watermarks);
        watermarks.open.clear();
        watermarks.free.clear();
    }

    /// Stores allocator counters pushed by framework code and raises every open watermark,
    /// so a value pushed between two ticks is still in the peak.
    pub(crate) fn record_allocator(&self, allocated: Option<u64>, reserved: Option<u64>) {
        let pushed = [(figure::ALLOCATED, allocated), (figure::RESERVED, reserved)];
        let pushed = pushed.map(|(figure, value)| (figure, Reading::from(value)));
        for (figure, value) in pushed {
            if value.is_some() {
                self.latest[figure].store(value);
            }
        }
        let watermarks = lock(&self.watermarks);
        for watermark in &watermarks.open {
            for (figure, value) in pushed {
                watermark.raise_figure(figure, value);
            }
        }
    }

    pub(crate) fn stats(&self) -> SamplerStats {
        let samples = self.ticks.load(Ordering::Relaxed);
        let load = |a: &AtomicReading| a.load().get().map(Duration::from_nanos);
        let elapsed = self.elapsed_ns.load(Ordering::Relaxed);
        SamplerStats {
            samples,
            interval: self.interval,
            max_gap: Duration::from_nanos(self.max_gap_ns.load(Ordering::Relaxed)),
            missed_ticks: self.missed_ticks(),
            achieved_interval: (samples > 1).then(|| Duration::from_nanos(elapsed / (samples - 1))),
            widened_interval: load(&self.widened_ns),
            memory_read: Duration::from_nanos(self.memory_cost_ns.load(Ordering::Relaxed)),
            process_interval: load(&self.process_every_ns),
            process_read: load(&self.process_cost_ns),
            process_lists: self.process_lists.load(Ordering::Relaxed),
            driver_check: lock(&self.driver_check).clone(),
        }
    }
}

#[cfg(test)]
mod tests;

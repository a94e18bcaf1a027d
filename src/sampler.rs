//! The background sampling thread: latest readings and a peak watermark for every open span.
//!
//! The training thread never reads a device. It copies the latest figures (atomics) when a
//! span opens and closes, and registers a [`Watermark`] that the sampler raises at every
//! tick. The only lock the training thread takes is the watermark list's, which the sampler
//! holds for the few atomic maxima of one tick.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::source::host::HostMemory;
use crate::source::{Device, DeviceReading, MemorySource};
use crate::timeline::{Tick, TickObserver};

/// Metric readers that keep their own `gpu.memory.peak` window: the exporter's and the
/// Prometheus endpoint's.
pub(crate) const METRIC_READERS: usize = 2;

/// Marks a figure that was not measured. Never reported as a value.
pub(crate) const ABSENT: u64 = u64::MAX;

/// Positions of the figures every reading carries; device `i` is at `DEVICE0 + i`.
pub(crate) mod figure {
    /// Device memory used, summed over the devices in scope.
    pub(crate) const GPU_USED: usize = 0;
    /// This process's GPU memory, summed over the devices in scope.
    pub(crate) const PROCESS_GPU: usize = 1;
    /// Host resident memory of this process.
    pub(crate) const HOST_RSS: usize = 2;
    /// Allocator counters pushed by framework code.
    pub(crate) const ALLOCATED: usize = 3;
    pub(crate) const RESERVED: usize = 4;
    /// First per-device figure.
    pub(crate) const DEVICE0: usize = 5;
}

/// State shared between the sampler thread, open spans and metric callbacks.
#[derive(Debug)]
pub(crate) struct Shared {
    source_name: String,
    devices: Vec<Device>,
    /// `gpu.<i>.memory.start` / `.end` / `.peak` of every device, made once.
    device_keys: Vec<[opentelemetry::Key; 3]>,
    latest: Box<[AtomicU64]>,
    totals: Box<[AtomicU64]>,
    /// `f64` bits; `ABSENT` when not measured.
    utilization: Box<[AtomicU64]>,
    /// Per metric reader, per device: the highest reading since that reader last
    /// collected. One window per reader, so a Prometheus scrape does not reset the peak an
    /// OTLP export is about to report.
    peak_windows: Box<[Box<[AtomicU64]>]>,
    /// Bit `i` set: device `i` failed its last read.
    failing: AtomicU64,
    last_errors: Mutex<Vec<Option<String>>>,
    watermarks: Mutex<Vec<Weak<Watermark>>>,
    interval: Duration,
    ticks: AtomicU64,
    max_gap_ns: AtomicU64,
}

/// The figures at a span's start and the highest seen while it is open.
#[derive(Debug)]
pub(crate) struct Watermark {
    pub(crate) start: Box<[u64]>,
    /// Devices failing when the span opened (bit `i`: device `i`).
    pub(crate) start_failing: u64,
    peaks: Box<[AtomicU64]>,
    samples: AtomicU64,
    errors: AtomicU64,
}

impl Watermark {
    pub(crate) fn peak(&self, figure: usize) -> u64 {
        self.peaks[figure].load(Ordering::Relaxed)
    }

    /// Sampler ticks taken while the span was open.
    pub(crate) fn samples(&self) -> u64 {
        self.samples.load(Ordering::Relaxed)
    }

    /// Bit `i` set: device `i` failed a read while the span was open.
    pub(crate) fn errors(&self) -> u64 {
        self.errors.load(Ordering::Relaxed)
    }

    fn raise(&self, figures: &[u64], failing: u64) {
        for (peak, &value) in self.peaks.iter().zip(figures) {
            if value != ABSENT {
                raise(peak, value);
            }
        }
        self.samples.fetch_add(1, Ordering::Relaxed);
        if failing != 0 {
            self.errors.fetch_or(failing, Ordering::Relaxed);
        }
    }
}

/// Raises `peak` to `value`, treating `ABSENT` as "nothing yet".
fn raise(peak: &AtomicU64, value: u64) {
    let _ = peak.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |current| {
        (current == ABSENT || value > current).then_some(value)
    });
}

/// How the sampler kept up with its schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SamplerStats {
    /// Readings taken since the sampler started.
    pub samples: u64,
    /// The interval the sampler was asked to keep.
    pub interval: Duration,
    /// The longest time between two readings. Above twice the interval, a short spike may
    /// have been missed (the machine was too busy to run the sampler on time).
    pub max_gap: Duration,
}

impl Shared {
    fn new(source_name: String, devices: Vec<Device>, interval: Duration) -> Self {
        let n = devices.len();
        let atomics = |len: usize| (0..len).map(|_| AtomicU64::new(ABSENT)).collect();
        let device_keys = devices
            .iter()
            .map(|device| {
                ["start", "end", "peak"].map(|end| {
                    let name: Arc<str> = format!("gpu.{}.memory.{end}", device.index).into();
                    opentelemetry::Key::from(name)
                })
            })
            .collect();
        Self {
            source_name,
            device_keys,
            latest: atomics(figure::DEVICE0 + n),
            totals: atomics(n),
            utilization: atomics(n),
            peak_windows: (0..METRIC_READERS).map(|_| atomics(n)).collect(),
            failing: AtomicU64::new(0),
            last_errors: Mutex::new(vec![None; n]),
            watermarks: Mutex::new(Vec::new()),
            devices,
            interval,
            ticks: AtomicU64::new(0),
            max_gap_ns: AtomicU64::new(0),
        }
    }

    /// `nvml`, `nvidia-smi`, or `none`.
    pub(crate) fn source_name(&self) -> &str {
        &self.source_name
    }

    /// Devices in scope, in reading order.
    pub(crate) fn devices(&self) -> &[Device] {
        &self.devices
    }

    /// The attribute keys of device `i`: start, end, peak.
    pub(crate) fn device_keys(&self, device: usize) -> &[opentelemetry::Key; 3] {
        &self.device_keys[device]
    }

    pub(crate) fn latest(&self, figure: usize) -> u64 {
        self.latest[figure].load(Ordering::Relaxed)
    }

    pub(crate) fn total(&self, device: usize) -> u64 {
        self.totals[device].load(Ordering::Relaxed)
    }

    pub(crate) fn utilization(&self, device: usize) -> Option<f64> {
        let bits = self.utilization[device].load(Ordering::Relaxed);
        (bits != ABSENT).then(|| f64::from_bits(bits))
    }

    /// The highest usage of `device` since `reader` last asked, restarting the window at
    /// the latest reading.
    pub(crate) fn take_peak_since_collect(&self, reader: usize, device: usize) -> u64 {
        let current = self.latest(figure::DEVICE0 + device);
        let peak = self.peak_windows[reader][device].swap(current, Ordering::Relaxed);
        match (peak, current) {
            (ABSENT, c) => c,
            (p, ABSENT) => p,
            (p, c) => p.max(c),
        }
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
                parts.push(format!("gpu {}: {message}", device.index));
            }
        }
        parts.join("; ")
    }

    /// Starts tracking a span: copies the latest figures and registers a watermark.
    pub(crate) fn open_watermark(&self) -> Arc<Watermark> {
        let start: Box<[u64]> = self
            .latest
            .iter()
            .map(|v| v.load(Ordering::Relaxed))
            .collect();
        let peaks = start.iter().map(|&v| AtomicU64::new(v)).collect();
        let watermark = Arc::new(Watermark {
            start_failing: self.failing.load(Ordering::Relaxed),
            start,
            peaks,
            samples: AtomicU64::new(0),
            errors: AtomicU64::new(0),
        });
        lock(&self.watermarks).push(Arc::downgrade(&watermark));
        watermark
    }

    /// Stores allocator counters pushed by framework code and raises every open watermark,
    /// so a value pushed between two ticks is still in the peak.
    pub(crate) fn record_allocator(&self, allocated: Option<u64>, reserved: Option<u64>) {
        let pushed = [(figure::ALLOCATED, allocated), (figure::RESERVED, reserved)];
        for (figure, value) in pushed {
            if let Some(value) = value {
                self.latest[figure].store(value.min(ABSENT - 1), Ordering::Relaxed);
            }
        }
        let watermarks = lock(&self.watermarks);
        for watermark in watermarks.iter().filter_map(Weak::upgrade) {
            for (figure, value) in pushed {
                if let Some(value) = value {
                    raise(&watermark.peaks[figure], value.min(ABSENT - 1));
                }
            }
        }
    }

    pub(crate) fn stats(&self) -> SamplerStats {
        SamplerStats {
            samples: self.ticks.load(Ordering::Relaxed),
            interval: self.interval,
            max_gap: Duration::from_nanos(self.max_gap_ns.load(Ordering::Relaxed)),
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The sampler thread and the state it publishes.
#[derive(Debug)]
pub(crate) struct Sampler {
    shared: Arc<Shared>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Sampler {
    /// Takes one reading right away (so the first span has start figures), then keeps
    /// sampling every `interval` on a thread named `gpuspan-sampler`.
    pub(crate) fn start(
        source: Option<Box<dyn MemorySource>>,
        interval: Duration,
        observers: Vec<Box<dyn TickObserver>>,
    ) -> std::io::Result<Self> {
        let interval = match source.as_ref().and_then(|s| s.min_interval()) {
            Some(min) => interval.max(min),
            None => interval,
        };
        let (name, devices) = match &source {
            Some(source) => (source.name().to_owned(), source.devices().to_vec()),
            None => ("none".to_owned(), Vec::new()),
        };
        let shared = Arc::new(Shared::new(name, devices, interval));
        let mut ticker = Ticker::new(source, Arc::clone(&shared), observers);
        ticker.tick();
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let stop = Arc::clone(&stop);
            std::thread::Builder::new()
                .name("gpuspan-sampler".into())
                .spawn(move || ticker.run(interval, &stop))?
        };
        Ok(Self {
            shared,
            stop,
            thread: Some(thread),
        })
    }

    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// Stops the thread and waits for it.
    pub(crate) fn stop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            thread.thread().unpark();
            let _ = thread.join();
        }
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.stop();
    }
}

/// What the sampler thread owns.
struct Ticker {
    source: Option<Box<dyn MemorySource>>,
    host: HostMemory,
    readings: Vec<DeviceReading>,
    figures: Vec<u64>,
    shared: Arc<Shared>,
    warned: u64,
    last_tick: Option<Instant>,
    observers: Vec<Box<dyn TickObserver>>,
    /// Per device, as observers see them.
    tick_used: Vec<Option<u64>>,
    tick_totals: Vec<Option<u64>>,
}

impl Ticker {
    fn new(
        source: Option<Box<dyn MemorySource>>,
        shared: Arc<Shared>,
        observers: Vec<Box<dyn TickObserver>>,
    ) -> Self {
        let n = shared.devices.len();
        Self {
            observers,
            tick_used: vec![None; n],
            tick_totals: vec![None; n],
            source,
            host: HostMemory::open(),
            readings: vec![DeviceReading::default(); n],
            figures: vec![ABSENT; figure::DEVICE0 + n],
            shared,
            warned: 0,
            last_tick: None,
        }
    }

    fn run(&mut self, interval: Duration, stop: &AtomicBool) {
        let mut next = Instant::now() + interval;
        while !stop.load(Ordering::Relaxed) {
            let now = Instant::now();
            if now < next {
                std::thread::park_timeout(next - now);
                continue;
            }
            self.tick();
            next += interval;
            let now = Instant::now();
            if next < now {
                // Fell behind (the machine was busy): resume the schedule from now rather
                // than taking a burst of catch-up readings.
                next = now + interval;
            }
        }
        for observer in &mut self.observers {
            observer.on_stop();
        }
    }

    /// Reads every source once, publishes the figures and raises open watermarks.
    fn tick(&mut self) {
        let now = Instant::now();
        if let Some(last) = self.last_tick.replace(now) {
            let gap = u64::try_from((now - last).as_nanos()).unwrap_or(u64::MAX);
            self.shared.max_gap_ns.fetch_max(gap, Ordering::Relaxed);
        }
        self.figures.fill(ABSENT);
        let failing = self.read_devices();
        self.figures[figure::HOST_RSS] = self.host.resident_bytes().unwrap_or(ABSENT);
        let shared = &*self.shared;
        for (i, &value) in self.figures.iter().enumerate() {
            if i != figure::ALLOCATED && i != figure::RESERVED {
                shared.latest[i].store(value, Ordering::Relaxed);
            }
        }
        shared.failing.store(failing, Ordering::Relaxed);
        for window in shared.peak_windows.iter() {
            for (device, peak) in window.iter().enumerate() {
                let value = self.figures[figure::DEVICE0 + device];
                if value != ABSENT {
                    raise(peak, value);
                }
            }
        }
        {
            let mut watermarks = lock(&shared.watermarks);
            watermarks.retain(|weak| match weak.upgrade() {
                Some(watermark) => {
                    watermark.raise(&self.figures, failing);
                    true
                }
                None => false,
            });
        }
        shared.ticks.fetch_add(1, Ordering::Relaxed);
        self.notify_observers();
    }

    /// Hands this tick to the observers (timeline file, near-OOM ring, range-max store).
    fn notify_observers(&mut self) {
        if self.observers.is_empty() {
            return;
        }
        let shared = &*self.shared;
        let present = |v: u64| (v != ABSENT).then_some(v);
        for (i, slot) in self.tick_used.iter_mut().enumerate() {
            *slot = present(self.figures[figure::DEVICE0 + i]);
        }
        for (i, slot) in self.tick_totals.iter_mut().enumerate() {
            *slot = present(shared.total(i));
        }
        let tick = Tick {
            unix_nanos: crate::runlog::unix_nanos(std::time::SystemTime::now()),
            devices: &self.tick_used,
            totals: &self.tick_totals,
            process_gpu: present(self.figures[figure::PROCESS_GPU]),
            host_rss: present(self.figures[figure::HOST_RSS]),
            allocated: present(shared.latest(figure::ALLOCATED)),
            reserved: present(shared.latest(figure::RESERVED)),
        };
        for observer in &mut self.observers {
            observer.on_tick(&tick);
        }
    }

    /// Reads the GPU source into `figures`; returns the mask of devices that failed.
    fn read_devices(&mut self) -> u64 {
        let Some(source) = self.source.as_mut() else {
            return 0;
        };
        for reading in &mut self.readings {
            *reading = DeviceReading::default();
        }
        source.read(&mut self.readings);
        let shared = Arc::clone(&self.shared);
        // Sums are over the devices that could be read (a failing device is named in the
        // error status of the spans open meanwhile, and a span whose start and end were
        // summed over different devices leaves the sums out). A device that was read but
        // cannot say what this process holds leaves the process sum out entirely.
        let mut used_sum = Some(0u64);
        let mut process_sum = Some(0u64);
        let mut failing = 0u64;
        for (i, reading) in self.readings.iter().enumerate() {
            shared.totals[i].store(reading.total.unwrap_or(ABSENT), Ordering::Relaxed);
            let utilization = reading.utilization.map_or(ABSENT, f64::to_bits);
            shared.utilization[i].store(utilization, Ordering::Relaxed);
            if let Some(error) = &reading.error {
                if i < 64 {
                    failing |= 1 << i;
                }
                lock(&shared.last_errors)[i] = Some(error.clone());
                continue;
            }
            if let Some(used) = reading.used {
                self.figures[figure::DEVICE0 + i] = used.min(ABSENT - 1);
            }
            used_sum = used_sum.zip(reading.used).map(|(a, b)| a.saturating_add(b));
            process_sum = process_sum
                .zip(reading.process_used)
                .map(|(a, b)| a.saturating_add(b));
        }
        if failing.count_ones() as usize >= self.readings.len() {
            used_sum = None;
            process_sum = None;
        }
        for i in 0..self.readings.len() {
            if let Some(error) = self.readings[i].error.clone() {
                self.warn_once(i, &error);
            }
        }
        let sum = |total: Option<u64>| total.map_or(ABSENT, |v| v.min(ABSENT - 1));
        self.figures[figure::GPU_USED] = sum(used_sum);
        self.figures[figure::PROCESS_GPU] = sum(process_sum);
        failing
    }

    fn warn_once(&mut self, device: usize, error: &str) {
        let bit = 1u64 << device.min(63);
        if self.warned & bit == 0 {
            self.warned |= bit;
            let index = self.shared.devices[device].index;
            eprintln!(
                "gpuspan: warning: gpu {index} could not be read ({error}); its figures are left \
                 out and spans open meanwhile get an error status; other devices keep reporting"
            );
        }
    }
}

//! The background sampling thread: latest readings and a peak watermark for every open span.
//!
//! The training thread never reads a device. It copies the latest figures (atomics) when a
//! span opens and closes, and registers a [`Watermark`] that the sampler raises at every
//! tick. The only lock the training thread takes is the watermark list's, which the sampler
//! holds for the few atomic maxima of one tick.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::source::host::HostMemory;
use crate::source::{Device, DeviceReading, MemorySource};
use crate::timeline::{Tick, TickObserver};
use crate::util::sync::lock;

/// Marks a figure that was not measured, inside this module's atomics only: everything
/// outside reads `Option<u64>`.
const ABSENT: u64 = u64::MAX;

/// An atomic's value as a reading.
fn reading(raw: u64) -> Option<u64> {
    (raw != ABSENT).then_some(raw)
}

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
    /// Shared with every span's `gpu.memory.source` without a copy.
    source_name: std::sync::Arc<str>,
    devices: Vec<Device>,
    /// `gpu.<i>.memory.start` / `.end` / `.peak` of every device, made once.
    device_keys: Vec<[opentelemetry::Key; 3]>,
    device_indices: Vec<u32>,
    latest: Box<[AtomicU64]>,
    totals: Box<[AtomicU64]>,
    /// `f64` bits; `ABSENT` when not measured.
    utilization: Box<[AtomicU64]>,
    /// Peak windows registered by metric readers: each reader has its own, so a Prometheus
    /// scrape does not reset the peak an OTLP export is about to report.
    peak_windows: Mutex<Vec<Arc<PeakWindow>>>,
    /// Bit `i` set: device `i` failed its last read.
    failing: AtomicU64,
    last_errors: Mutex<Vec<Option<String>>>,
    watermarks: Mutex<Watermarks>,
    /// Spans stop registering watermarks once gpuspan shuts down.
    closed: AtomicBool,
    interval: Duration,
    ticks: AtomicU64,
    max_gap_ns: AtomicU64,
}

/// `gpu.<index>.memory.start` / `.end` / `.peak`, made once per device index for the life
/// of the process: static keys cost nothing to copy onto every span and to drop (a shared
/// string would cost two atomic operations per key per span).
fn device_keys(index: u32) -> [&'static str; 3] {
    static KEYS: Mutex<Vec<(u32, [&'static str; 3])>> = Mutex::new(Vec::new());
    let mut keys = lock(&KEYS);
    if let Some((_, made)) = keys.iter().find(|(i, _)| *i == index) {
        return *made;
    }
    let made = crate::figures::device_keys(index).map(|key| &*Box::leak(key.into_boxed_str()));
    keys.push((index, made));
    made
}

/// Open spans' watermarks, and closed ones kept for reuse so that opening a span does not
/// allocate.
#[derive(Debug, Default)]
struct Watermarks {
    open: Vec<Arc<Watermark>>,
    free: Vec<Arc<Watermark>>,
}

/// Most watermarks kept for reuse.
const FREE_WATERMARKS: usize = 256;

/// The figures at a span's start and the highest seen while it is open.
#[derive(Debug)]
pub(crate) struct Watermark {
    start: Box<[AtomicU64]>,
    /// Devices failing when the span opened (bit `i`: device `i`).
    start_failing: AtomicU64,
    peaks: Box<[AtomicU64]>,
    samples: AtomicU64,
    errors: AtomicU64,
    /// Cleared when the span closes; the sampler then moves it to the free list.
    open: AtomicBool,
}

impl Watermark {
    fn new(figures: usize) -> Self {
        let atomics = || (0..figures).map(|_| AtomicU64::new(ABSENT)).collect();
        Self {
            start: atomics(),
            start_failing: AtomicU64::new(0),
            peaks: atomics(),
            samples: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            open: AtomicBool::new(false),
        }
    }

    /// A figure when the span opened.
    pub(crate) fn start(&self, figure: usize) -> Option<u64> {
        reading(self.start[figure].load(Ordering::Relaxed))
    }

    /// The highest reading of a figure while the span was open (start included).
    pub(crate) fn peak(&self, figure: usize) -> Option<u64> {
        reading(self.peaks[figure].load(Ordering::Relaxed))
    }

    /// Devices failing when the span opened (bit `i`: device `i`).
    pub(crate) fn start_failing(&self) -> u64 {
        self.start_failing.load(Ordering::Relaxed)
    }

    /// Stops raising this watermark; the sampler recycles it.
    pub(crate) fn close(&self) {
        self.open.store(false, Ordering::Release);
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

/// A metric reader's `gpu.memory.peak` window: per device, the highest reading since the
/// reader last collected.
#[derive(Debug)]
pub(crate) struct PeakWindow(Box<[AtomicU64]>);

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
    pub(crate) fn new(source_name: String, devices: Vec<Device>, interval: Duration) -> Self {
        let n = devices.len();
        let atomics = |len: usize| (0..len).map(|_| AtomicU64::new(ABSENT)).collect();
        let device_keys = devices
            .iter()
            .map(|device| device_keys(device.index).map(opentelemetry::Key::from_static_str))
            .collect();
        Self {
            source_name: source_name.into(),
            device_indices: devices.iter().map(|d| d.index).collect(),
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
        }
    }

    /// `nvml`, `nvidia-smi`, or `none`.
    pub(crate) fn source_name(&self) -> &str {
        &self.source_name
    }

    /// The source name as an attribute value.
    pub(crate) fn source_value(&self) -> opentelemetry::Value {
        opentelemetry::Value::String(std::sync::Arc::clone(&self.source_name).into())
    }

    /// Devices in scope, in reading order.
    pub(crate) fn devices(&self) -> &[Device] {
        &self.devices
    }

    /// The NVML index of every device in scope, in reading order.
    pub(crate) fn device_indices(&self) -> &[u32] {
        &self.device_indices
    }

    /// The attribute keys of every device in scope: start, end, peak.
    pub(crate) fn all_device_keys(&self) -> &[[opentelemetry::Key; 3]] {
        &self.device_keys
    }

    /// The latest reading of a figure.
    pub(crate) fn latest(&self, figure: usize) -> Option<u64> {
        reading(self.latest[figure].load(Ordering::Relaxed))
    }

    /// Memory installed on device `i`.
    pub(crate) fn total(&self, device: usize) -> Option<u64> {
        reading(self.totals[device].load(Ordering::Relaxed))
    }

    pub(crate) fn utilization(&self, device: usize) -> Option<f64> {
        let bits = self.utilization[device].load(Ordering::Relaxed);
        (bits != ABSENT).then(|| f64::from_bits(bits))
    }

    /// Registers a metric reader's own peak window, raised at every tick from now on.
    pub(crate) fn register_peak_window(&self) -> Arc<PeakWindow> {
        let window = Arc::new(PeakWindow(
            (0..self.devices.len())
                .map(|_| AtomicU64::new(ABSENT))
                .collect(),
        ));
        lock(&self.peak_windows).push(Arc::clone(&window));
        window
    }

    /// The highest usage of `device` since `window` was last taken, restarting the window
    /// at the latest reading.
    pub(crate) fn take_peak(&self, window: &PeakWindow, device: usize) -> Option<u64> {
        let current = self.latest[figure::DEVICE0 + device].load(Ordering::Relaxed);
        let peak = window.0[device].swap(current, Ordering::Relaxed);
        match (peak, current) {
            (ABSENT, c) => reading(c),
            (p, ABSENT) => Some(p),
            (p, c) => Some(p.max(c)),
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

    /// Starts tracking a span: copies the latest figures into a watermark the sampler
    /// raises at every tick. `None` once gpuspan has shut down (nothing would raise it).
    pub(crate) fn open_watermark(&self) -> Option<Arc<Watermark>> {
        if self.closed.load(Ordering::Relaxed) {
            return None;
        }
        let mut watermarks = lock(&self.watermarks);
        let watermark = watermarks
            .free
            .pop()
            .unwrap_or_else(|| Arc::new(Watermark::new(self.latest.len())));
        for ((start, peak), latest) in watermark
            .start
            .iter()
            .zip(watermark.peaks.iter())
            .zip(self.latest.iter())
        {
            let value = latest.load(Ordering::Relaxed);
            start.store(value, Ordering::Relaxed);
            peak.store(value, Ordering::Relaxed);
        }
        watermark
            .start_failing
            .store(self.failing.load(Ordering::Relaxed), Ordering::Relaxed);
        watermark.samples.store(0, Ordering::Relaxed);
        watermark.errors.store(0, Ordering::Relaxed);
        watermark.open.store(true, Ordering::Release);
        watermarks.open.push(Arc::clone(&watermark));
        Some(watermark)
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
        for (figure, value) in pushed {
            if let Some(value) = value {
                self.latest[figure].store(value.min(ABSENT - 1), Ordering::Relaxed);
            }
        }
        let watermarks = lock(&self.watermarks);
        for watermark in &watermarks.open {
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

/// How long stopping waits for the sampler thread.
const STOP_WAIT: Duration = Duration::from_secs(1);

/// The sampler thread and the state it publishes.
#[derive(Debug)]
pub(crate) struct Sampler {
    shared: Arc<Shared>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    /// Receives when the thread has finished.
    done: std::sync::mpsc::Receiver<()>,
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
        let (finished, done) = std::sync::mpsc::sync_channel(1);
        let thread = {
            let stop = Arc::clone(&stop);
            std::thread::Builder::new()
                .name("gpuspan-sampler".into())
                .spawn(move || {
                    crate::background::silence_tracing();
                    ticker.run(interval, &stop);
                    let _ = finished.send(());
                })?
        };
        Ok(Self {
            shared,
            stop,
            thread: Some(thread),
            done,
        })
    }

    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// Stops the thread and waits for it.
    /// Stops the thread and waits for it, at most `STOP_WAIT`: a driver call that hangs
    /// (a GPU that fell off the bus) must not hang the program's exit. The thread is then
    /// left to end on its own.
    pub(crate) fn stop(&mut self) {
        self.shared.close();
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            thread.thread().unpark();
            if self.done.recv_timeout(STOP_WAIT).is_ok() {
                let _ = thread.join();
            }
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
        for window in lock(&shared.peak_windows).iter() {
            for (device, peak) in window.0.iter().enumerate() {
                let value = self.figures[figure::DEVICE0 + device];
                if value != ABSENT {
                    raise(peak, value);
                }
            }
        }
        {
            let mut watermarks = lock(&shared.watermarks);
            let Watermarks { open, free } = &mut *watermarks;
            open.retain(|watermark| {
                if watermark.open.load(Ordering::Acquire) {
                    watermark.raise(&self.figures, failing);
                    return true;
                }
                if free.len() < FREE_WATERMARKS {
                    free.push(Arc::clone(watermark));
                }
                false
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
            *slot = shared.total(i);
        }
        let tick = Tick {
            unix_nanos: crate::util::time::unix_nanos(std::time::SystemTime::now()),
            devices: &self.tick_used,
            totals: &self.tick_totals,
            process_gpu: present(self.figures[figure::PROCESS_GPU]),
            host_rss: present(self.figures[figure::HOST_RSS]),
            allocated: shared.latest(figure::ALLOCATED),
            reserved: shared.latest(figure::RESERVED),
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

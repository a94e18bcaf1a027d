//! The background sampling thread: latest readings and a peak watermark for every open span.
//!
//! The training thread never reads a device. It copies the latest figures (atomics) when a
//! span opens and closes, and registers a [`Watermark`](crate::figures::Watermark) that the sampler raises at every
//! tick, handing it back for the next span when the span ends (so a step neither allocates
//! one nor leaves one for the sampler to free). The only lock the training thread takes is
//! the watermark list's, which the sampler holds for the few atomic maxima of one tick.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::figures::Reading;
use crate::source::host::HostMemory;
use crate::source::{DeviceReading, MemorySource};
use crate::timeline::{Tick, TickObserver};
use crate::util::sync::lock;

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
    /// How often, in ns, the process figures were read (their peak: the widest).
    pub(crate) const PROCESS_RESOLUTION: usize = 5;
    /// The widened interval device memory was read at, in ns; absent when as asked.
    pub(crate) const GPU_RESOLUTION: usize = 6;
    /// First per-device figure.
    pub(crate) const DEVICE0: usize = 7;

    /// The power totals (`sampler/power.rs`), after the per-device figures, when the
    /// source reads energy, power or clocks: positions from [`Shared::power_base`].
    ///
    /// [`Shared::power_base`]: super::Shared::power_base
    pub(crate) use crate::figures::energy::slot as power;
}

mod cadence;
mod cost;
mod driver_check;
mod meter;
pub(crate) mod power;
mod processes;
mod shared;
mod watermarks;

use cadence::Cadence;
pub(crate) use driver_check::line as driver_check_line;
pub use driver_check::DriverCheck;
pub(crate) use meter::{Call, SelfMeter};
use processes::Processes;
pub use shared::SamplerStats;
pub(crate) use shared::Shared;

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
    /// The process-list thread, when the source lists processes apart.
    processes: Option<(
        Arc<Processes>,
        JoinHandle<()>,
        std::sync::mpsc::Receiver<()>,
    )>,
}

/// Runs `body` on a background thread named `name`; the receiver hears when it ends.
fn spawn(
    name: &str,
    body: impl FnOnce() + Send + 'static,
) -> std::io::Result<(JoinHandle<()>, std::sync::mpsc::Receiver<()>)> {
    let (finished, done) = std::sync::mpsc::sync_channel(1);
    let thread = std::thread::Builder::new()
        .name(name.into())
        .spawn(move || {
            crate::background::silence_tracing();
            body();
            let _ = finished.send(());
        })?;
    Ok((thread, done))
}

impl Sampler {
    /// Takes one reading right away (so the first span has start figures), then keeps
    /// sampling every `interval` on a thread named `gpuspan-sampler`; process lists that
    /// cost too much for that thread run on `gpuspan-procs` (see `processes.rs`).
    pub(crate) fn start(
        mut source: Option<Box<dyn MemorySource>>,
        interval: Duration,
        power_interval: Duration,
        observers: Vec<Box<dyn TickObserver>>,
    ) -> std::io::Result<Self> {
        let interval = crate::source::read_interval(source.as_deref(), interval);
        let (name, devices) = match &source {
            Some(source) => (source.name().to_owned(), source.devices().to_vec()),
            None => ("none".to_owned(), Vec::new()),
        };
        let lister = source.as_mut().and_then(|s| s.process_lister());
        let processes =
            lister.map(|lister| Arc::new(Processes::new(lister, devices.len(), interval)));
        let power = source
            .as_deref_mut()
            .and_then(|s| power::Power::probe(s, power_interval));
        let mut shared = Shared::new(name, devices, interval);
        if power.is_some() {
            let scope = source.as_deref().and_then(|s| s.energy_scope());
            shared.read_power(power::Power::slots(shared.devices.len()), scope);
            // A counter is read at most every power interval: until it is seen moving
            // twice, a shorter span takes the power readings, never a zero count.
            let read_every = power_interval.max(interval);
            if read_every > crate::figures::energy::ASSUMED_PERIOD {
                shared
                    .energy_period_ns
                    .store(Reading::some(processes::nanos(read_every)));
            }
        }
        let shared = Arc::new(shared);
        let mut ticker = Ticker::new(source, Arc::clone(&shared), observers, interval);
        ticker.processes = processes.clone();
        ticker.power = power;
        ticker.tick();
        let stop = Arc::new(AtomicBool::new(false));
        let processes = match processes {
            Some(processes) => {
                let (p, s, stop) = (
                    Arc::clone(&processes),
                    Arc::clone(&shared),
                    Arc::clone(&stop),
                );
                // Late lists only coarsen the process figures: they yield to the program.
                let (thread, done) = spawn("gpuspan-procs", move || {
                    crate::background::background_priority();
                    p.run(&s, &stop)
                })?;
                Some((processes, thread, done))
            }
            None => None,
        };
        let (thread, done) = {
            let stop = Arc::clone(&stop);
            spawn("gpuspan-sampler", move || ticker.run(&stop))?
        };
        Ok(Self {
            shared,
            stop,
            thread: Some(thread),
            done,
            processes,
        })
    }

    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// Stops the threads and waits for them, at most `STOP_WAIT` in all: a driver call
    /// that hangs (a GPU that fell off the bus) must not hang the program's exit. A thread
    /// still in such a call is left to end on its own. Says once when the sampler kept a
    /// cadence worse than asked.
    pub(crate) fn stop(&mut self) {
        self.shared.close();
        self.stop.store(true, Ordering::Relaxed);
        let Some(thread) = self.thread.take() else {
            return;
        };
        let deadline = Instant::now() + STOP_WAIT;
        thread.thread().unpark();
        if let Some((processes, _, _)) = &self.processes {
            processes.unpark();
        }
        if self.done.recv_timeout(STOP_WAIT).is_ok() {
            let _ = thread.join();
        }
        if let Some((processes, thread, done)) = self.processes.take() {
            let left = deadline.saturating_duration_since(Instant::now());
            if done.recv_timeout(left).is_ok() {
                let _ = thread.join();
                if let Some(checks) = processes.check_against_driver(&self.shared.device_ids) {
                    *lock(&self.shared.driver_check) = checks;
                }
            }
        }
        let stats = self.shared.stats();
        if let Some(line) = cadence::shutdown_line(&stats) {
            eprintln!("{line}");
        }
        if let Some(line) = driver_check::line(&stats.driver_check, stats.process_interval) {
            eprintln!("{line}");
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
    figures: Vec<Reading>,
    shared: Arc<Shared>,
    warned: u64,
    last_tick: Option<Instant>,
    observers: Vec<Box<dyn TickObserver>>,
    /// Per device, as observers see them.
    tick_used: Vec<Option<u64>>,
    tick_totals: Vec<Option<u64>>,
    cadence: Cadence,
    first_tick: Option<Instant>,
    /// This process's memory per device, when the source lists processes apart.
    processes: Option<Arc<Processes>>,
    /// Energy, power and clocks, when the source reads them.
    power: Option<power::Power>,
}

impl Ticker {
    fn new(
        source: Option<Box<dyn MemorySource>>,
        shared: Arc<Shared>,
        observers: Vec<Box<dyn TickObserver>>,
        interval: Duration,
    ) -> Self {
        let n = shared.devices.len();
        Self {
            cadence: Cadence::new(interval),
            first_tick: None,
            processes: None,
            power: None,
            observers,
            tick_used: vec![None; n],
            tick_totals: vec![None; n],
            source,
            host: HostMemory::open(),
            readings: vec![DeviceReading::default(); n],
            figures: vec![Reading::NONE; shared.latest.len()],
            shared,
            warned: 0,
            last_tick: None,
        }
    }

    fn run(&mut self, stop: &AtomicBool) {
        // The schedule starts here: the reading taken before the thread started (for the
        // first span's start figures) is not part of it, nor the time since.
        self.last_tick = None;
        let mut next = Instant::now() + self.cadence.interval();
        while !stop.load(Ordering::Relaxed) {
            let now = Instant::now();
            if now < next {
                std::thread::park_timeout(next - now);
                continue;
            }
            self.tick();
            let interval = self.cadence.interval();
            next += interval;
            let now = Instant::now();
            if next < now {
                // Fell behind (the machine was busy, or a read was slow): resume the
                // schedule from now rather than taking a burst of catch-up readings, and
                // count the readings skipped.
                let behind = (now - next).as_nanos() / interval.as_nanos().max(1);
                let missed = 1 + u64::try_from(behind).unwrap_or(u64::MAX);
                self.shared
                    .missed_ticks
                    .fetch_add(missed, Ordering::Relaxed);
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
            self.shared.meter_interval(now - last);
        }
        let first = *self.first_tick.get_or_insert(now);
        let elapsed = processes::nanos(now - first);
        self.shared.elapsed_ns.store(elapsed, Ordering::Relaxed);
        let memory = figure::DEVICE0 + self.shared.devices.len();
        // The power totals stay between their own reads.
        self.figures[..memory].fill(Reading::NONE);
        let failing = self.read_devices();
        let power_read = self.read_power(now, memory);
        if let Some(widened) = self.cadence.widened() {
            let widened = Reading::some(processes::nanos(widened));
            self.figures[figure::GPU_RESOLUTION] = widened;
            self.shared.widened_ns.raise(widened);
        }
        self.figures[figure::HOST_RSS] = self.host.resident_bytes().into();
        let shared = &*self.shared;
        for (i, &value) in self.figures[..memory].iter().enumerate() {
            if i != figure::ALLOCATED && i != figure::RESERVED {
                shared.latest[i].store(value);
            }
        }
        shared.failing.store(failing, Ordering::Relaxed);
        for window in lock(&shared.peak_windows).iter() {
            for (device, peak) in window.0.iter().enumerate() {
                peak.raise(self.figures[figure::DEVICE0 + device]);
            }
        }
        let moved = self
            .power
            .as_ref()
            .filter(|_| power_read)
            .map(power::Power::moved);
        let watermarks = lock(&shared.watermarks);
        // The power totals move under the lock a span opens under, with the open spans'
        // sums: a span opening now sees the totals before this read and gets its share,
        // or those after it and not.
        for (latest, &value) in shared.latest[memory..].iter().zip(&self.figures[memory..]) {
            latest.store(value);
        }
        for watermark in &watermarks.open {
            watermark.raise(&self.figures[..memory], failing);
            if let Some(moved) = moved {
                watermark.add_power(moved);
            }
        }
        drop(watermarks);
        shared.ticks.fetch_add(1, Ordering::Relaxed);
        self.notify_observers();
    }

    /// Reads energy, power and clocks when their interval has passed; whether it read.
    fn read_power(&mut self, now: Instant, base: usize) -> bool {
        let (Some(power), Some(source)) = (self.power.as_mut(), self.source.as_mut()) else {
            return false;
        };
        let started = Instant::now();
        let read = power.tick(source.as_mut(), now, &mut self.figures, base);
        if read {
            self.shared.meter(Call::Power, started.elapsed());
            for (slot, mw) in self.shared.power_mw.iter().zip(power.device_power()) {
                slot.store(mw.into());
            }
            if let Some(period) = power.period {
                self.shared
                    .energy_period_ns
                    .store(Reading::some(processes::nanos(period)));
            }
        }
        read
    }

    /// Hands this tick to the observers (timeline file, near-OOM ring, range-max store).
    fn notify_observers(&mut self) {
        if self.observers.is_empty() {
            return;
        }
        let shared = &*self.shared;
        for (i, slot) in self.tick_used.iter_mut().enumerate() {
            *slot = self.figures[figure::DEVICE0 + i].get();
        }
        for (i, slot) in self.tick_totals.iter_mut().enumerate() {
            *slot = shared.total(i);
        }
        let tick = Tick {
            unix_nanos: crate::util::time::unix_nanos(std::time::SystemTime::now()),
            devices: &self.tick_used,
            totals: &self.tick_totals,
            process_gpu: self.figures[figure::PROCESS_GPU].get(),
            process_resolution_ns: self.figures[figure::PROCESS_RESOLUTION].get(),
            host_rss: self.figures[figure::HOST_RSS].get(),
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
        let started = Instant::now();
        source.read(&mut self.readings);
        let round = started.elapsed();
        let utilization = source.take_utilization_time();
        let shared = Arc::clone(&self.shared);
        self.measure_round(round, utilization);
        let mut resolution = self.cadence.interval();
        if let Some(processes) = &self.processes {
            processes.tick(&shared);
            for (i, reading) in self.readings.iter_mut().enumerate() {
                // A device the lister does not cover keeps what the source read.
                reading.process_used = processes.value(i).or(reading.process_used);
            }
            if let Some(every) = shared.process_every_ns.load().get() {
                resolution = Duration::from_nanos(every);
            }
        }
        // Sums are over the devices that could be read (a failing device is named in the
        // error status of the spans open meanwhile, and a span whose start and end were
        // summed over different devices leaves the sums out). A device that was read but
        // cannot say what this process holds leaves the process sum out entirely.
        let mut used_sum = Some(0u64);
        let mut process_sum = Some(0u64);
        let mut failing = 0u64;
        for (i, reading) in self.readings.iter().enumerate() {
            shared.totals[i].store(reading.total.into());
            // A finite share's bits are never all ones, the one value a reading reserves.
            let utilization = reading.utilization.map(f64::to_bits);
            shared.utilization[i].store(utilization.into());
            if let Some(error) = &reading.error {
                if i < 64 {
                    failing |= 1 << i;
                }
                lock(&shared.last_errors)[i] = Some(error.clone());
                continue;
            }
            if let Some(used) = reading.used {
                self.figures[figure::DEVICE0 + i] = Reading::some(used);
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
        self.figures[figure::GPU_USED] = used_sum.into();
        self.figures[figure::PROCESS_GPU] = process_sum.into();
        if process_sum.is_some() {
            self.figures[figure::PROCESS_RESOLUTION] = Reading::some(processes::nanos(resolution));
        }
        failing
    }

    /// Times one round of memory reads: the sampler's metrics, and the interval it keeps.
    fn measure_round(&mut self, round: Duration, utilization: Option<Duration>) {
        let devices = self.readings.len();
        let per_device = |d: Duration| d / u32::try_from(devices.max(1)).unwrap_or(u32::MAX);
        let memory = round.saturating_sub(utilization.unwrap_or_default());
        self.shared.meter(Call::Memory, per_device(memory));
        if let Some(utilization) = utilization {
            self.shared
                .meter(Call::Utilization, per_device(utilization));
        }
        self.cadence.after_round(memory, devices);
        let cost = processes::nanos(self.cadence.round_cost());
        self.shared.memory_cost_ns.store(cost, Ordering::Relaxed);
    }

    fn warn_once(&mut self, device: usize, error: &str) {
        let bit = 1u64 << device.min(63);
        if self.warned & bit == 0 {
            self.warned |= bit;
            let index = self.shared.devices[device].id();
            eprintln!(
                "gpuspan: warning: gpu {index} could not be read ({error}); its figures are left \
                 out and spans open meanwhile get an error status; other devices keep reporting"
            );
        }
    }
}

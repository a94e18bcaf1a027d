//! A scripted GPU memory source behind gpuspan's real `MemorySource` trait: the test sets
//! what each device reports, or plays a timeline, and waits for the sampler to read it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use gpuspan::source::GpuId;
use gpuspan::source::{Device, DeviceReading, MemorySource};

#[derive(Default)]
struct State {
    used: Vec<u64>,
    total: u64,
    process: Option<u64>,
    /// `(started, [(offset, value of device 0)])`: device 0 follows the timeline.
    timeline: Option<(Instant, Vec<(Duration, u64)>)>,
    /// When each read was taken (one per sampler tick), once asked for.
    read_times: Option<Vec<Instant>>,
}

/// The sampler's side.
pub struct ScriptedSource {
    devices: Vec<Device>,
    state: Arc<Mutex<State>>,
    reads: Arc<AtomicU64>,
}

/// The test's side.
#[derive(Clone)]
pub struct Script {
    state: Arc<Mutex<State>>,
    reads: Arc<AtomicU64>,
}

/// A source with `devices` devices, all reporting `used` bytes, and its controller.
pub fn scripted(devices: u32, used: u64) -> (ScriptedSource, Script) {
    let ids: Vec<GpuId> = (0..devices).map(GpuId::gpu).collect();
    scripted_ids(&ids, used)
}

/// A source with one device per id (whole GPUs or MIG instances), all reporting `used`
/// bytes, and its controller. Device `i` of the script is `ids[i]`.
pub fn scripted_ids(ids: &[GpuId], used: u64) -> (ScriptedSource, Script) {
    let state = Arc::new(Mutex::new(State {
        used: vec![used; ids.len()],
        total: 80 << 30,
        ..State::default()
    }));
    let reads = Arc::new(AtomicU64::new(0));
    let devices = ids
        .iter()
        .map(|id| Device {
            index: id.index,
            mig: id.mig,
            uuid: match id.mig {
                None => format!("GPU-scripted-{id}"),
                Some(_) => format!("MIG-scripted-{id}"),
            },
            name: "Scripted GPU".into(),
            vendor: "NVIDIA".into(),
        })
        .collect();
    (
        ScriptedSource {
            devices,
            state: Arc::clone(&state),
            reads: Arc::clone(&reads),
        },
        Script { state, reads },
    )
}

impl MemorySource for ScriptedSource {
    fn name(&self) -> &str {
        "scripted"
    }

    fn devices(&self) -> &[Device] {
        &self.devices
    }

    fn read(&mut self, out: &mut [DeviceReading]) {
        let mut state = self.state.lock().unwrap();
        if let Some(times) = &mut state.read_times {
            times.push(Instant::now());
        }
        for (i, reading) in out.iter_mut().enumerate() {
            let mut used = state.used[i];
            if let (0, Some((started, timeline))) = (i, &state.timeline) {
                let now = started.elapsed();
                if let Some((_, value)) = timeline.iter().rev().find(|(at, _)| *at <= now) {
                    used = *value;
                }
            }
            reading.used = Some(used);
            reading.total = Some(state.total);
            reading.utilization = Some(0.5);
            reading.process_used = state.process;
        }
        self.reads.fetch_add(1, Ordering::SeqCst);
    }
}

impl Script {
    /// Sets what device `device` reports from the next read on.
    pub fn set(&self, device: usize, used: u64) {
        self.state.lock().unwrap().used[device] = used;
    }

    /// Sets what every device reports from the next read on, all in the same read.
    pub fn set_all(&self, used: u64) {
        self.state.lock().unwrap().used.fill(used);
    }

    /// Sets this process's memory, reported on every device.
    pub fn set_process(&self, used: Option<u64>) {
        self.state.lock().unwrap().process = used;
    }

    /// Device 0 follows `timeline` (offsets from now) from the next read on.
    pub fn play(&self, timeline: &[(Duration, u64)]) {
        self.state.lock().unwrap().timeline = Some((Instant::now(), timeline.to_vec()));
    }

    /// Keeps the time of every read from now on, for [`Script::longest_gap_since`].
    pub fn keep_read_times(&self) {
        self.state
            .lock()
            .unwrap()
            .read_times
            .get_or_insert_with(Vec::new);
    }

    /// Reads kept so far by [`Script::keep_read_times`].
    pub fn reads_kept(&self) -> usize {
        let state = self.state.lock().unwrap();
        state.read_times.as_ref().map_or(0, Vec::len)
    }

    /// The longest time between two consecutive reads from kept read `from` on: the
    /// sampler's longest gap between ticks over that stretch.
    pub fn longest_gap_since(&self, from: usize) -> Duration {
        let state = self.state.lock().unwrap();
        let times = state.read_times.as_deref().unwrap_or_default();
        times
            .get(from.saturating_sub(1)..)
            .unwrap_or_default()
            .windows(2)
            .map(|pair| pair[1] - pair[0])
            .max()
            .unwrap_or_default()
    }

    /// Reads taken so far.
    pub fn reads(&self) -> u64 {
        self.reads.load(Ordering::SeqCst)
    }

    /// Waits until the sampler has read the source `n` more times and published the last
    /// of those readings: it reads once more only after a tick is fully handed out (the
    /// latest figures, every open span's watermark), so a span that closes next sees it.
    pub fn wait_reads(&self, n: u64) {
        let target = self.reads() + n + 1;
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.reads() < target {
            assert!(Instant::now() < deadline, "the sampler stopped reading");
            std::thread::sleep(Duration::from_micros(200));
        }
    }
}

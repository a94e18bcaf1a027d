//! The sampled timeline: what the sampler saw at each tick, handed to the consumers that
//! keep it (the run directory's timeline file, the near-OOM ring, and through
//! `pipeline`, a collector's store).
//!
//! Observers run on the sampler thread, never on the training thread: they must not block
//! (no I/O; hand data to a thread of their own through a bounded queue).

pub(crate) mod file;
pub(crate) mod writer;

/// One tick of the sampler: every figure it holds at a wall-clock instant.
#[derive(Debug, Clone, Copy)]
#[allow(dead_code)] // read by the observers that keep ticks
pub struct Tick<'a> {
    /// Wall clock, UNIX nanoseconds (the clock span times use).
    pub unix_nanos: u64,
    /// Memory used per device in scope, in the sampler's device order (`None`: not read).
    pub devices: &'a [Option<u64>],
    /// Memory installed per device (`None`: not read).
    pub totals: &'a [Option<u64>],
    /// This process's GPU memory summed over the devices, where the driver reports it.
    pub process_gpu: Option<u64>,
    /// How often, in ns, the process lists behind the process figures are read (they run
    /// on a cadence of their own, slower than the ticks on a real driver).
    pub process_resolution_ns: Option<u64>,
    /// Host resident memory of this process.
    pub host_rss: Option<u64>,
    /// The allocator counters last pushed by framework code.
    pub allocated: Option<u64>,
    /// See `allocated`.
    pub reserved: Option<u64>,
}

impl<'a> Tick<'a> {
    /// A tick of device memory alone, for tests and benches that feed observers.
    pub fn of_devices(unix_nanos: u64, devices: &'a [Option<u64>]) -> Self {
        Self {
            unix_nanos,
            devices,
            totals: &[],
            process_gpu: None,
            process_resolution_ns: None,
            host_rss: None,
            allocated: None,
            reserved: None,
        }
    }
}

/// Something that keeps ticks. Called on the sampler thread after every reading.
pub trait TickObserver: Send {
    /// One reading; must return in microseconds.
    fn on_tick(&mut self, tick: &Tick<'_>);

    /// The sampler stops: the last call.
    fn on_stop(&mut self) {}
}

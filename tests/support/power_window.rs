//! A run whose GPU draws a scripted power for a whole number of the fake NVML's energy
//! quanta while its epoch is open, and nothing before or after: the epoch's energy is then
//! known to the millijoule (watts times the window), and so is the device's counter.
//!
//! Each run loads a fake of its own, so runs on parallel threads (the ranks of a job) have
//! counters and call counts of their own.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::fake_nvml::{FakeNvml, ENERGY_QUANTUM};
use crate::setup;

/// The NVML function the sampler calls once per device per power reading.
pub const ENERGY_READ: &str = "nvmlDeviceGetTotalEnergyConsumption";

const PATIENCE: Duration = Duration::from_secs(60);

/// Waits until the sampler has read the device's energy `reads` more times, all begun after
/// this call, the last one published.
pub fn wait_for_power_reads(fake: &FakeNvml, reads: u64) {
    let target = fake.call_count(ENERGY_READ) + reads + 1;
    let deadline = Instant::now() + PATIENCE;
    while fake.call_count(ENERGY_READ) < target {
        assert!(
            Instant::now() < deadline,
            "the sampler stopped reading energy"
        );
        std::thread::sleep(Duration::from_micros(500));
    }
}

/// What a run with a power window drew, by the fake's own counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Drawn {
    /// The device's counter as the epoch opened, in mJ.
    pub before_mj: u64,
    /// The device's counter once the window had closed, in mJ.
    pub after_mj: u64,
}

impl Drawn {
    /// The counter's increase, in joules.
    pub fn joules(&self) -> f64 {
        (self.after_mj - self.before_mj) as f64 / 1000.0
    }
}

/// Runs one epoch into `<parent>/<id>` on a fake GPU of its own that draws `watts` for
/// `quanta` energy quanta from the first whole quantum after the epoch opened, and nothing
/// else; `steps` runs inside the epoch with the fake, to script its clocks.
pub fn run_epoch(
    parent: &Path,
    id: &str,
    watts: u64,
    quanta: u32,
    steps: impl FnOnce(&FakeNvml),
) -> Drawn {
    let fake = FakeNvml::build();
    // No power from the fake's start: its counter stays at its base until the window.
    fake.set_power_timeline(0, &[(Duration::ZERO, 0)]);
    let builder = gpuspan::Telemetry::builder()
        .run_dir(parent)
        .run_id(id)
        .service_name("power-window")
        .summary(false)
        .timeline(false)
        .tensorboard(false)
        .nvml_lib(fake.path())
        .sysfs_root("/nonexistent/sys")
        .sample_interval(Duration::from_millis(10));
    let (telemetry, drawn) = setup::run(builder, |_| {
        wait_for_power_reads(&fake, 1);
        let before_mj = fake.current_energy(0);
        let epoch = gpuspan::epoch_span!(0);
        let quantum = ENERGY_QUANTUM.as_nanos();
        let on = Duration::from_nanos(
            u64::try_from((fake.power_clock().as_nanos() / quantum + 1) * quantum).unwrap(),
        );
        let off = on + ENERGY_QUANTUM * quanta;
        fake.set_power_timeline(0, &[(Duration::ZERO, 0), (on, watts * 1000), (off, 0)]);
        steps(&fake);
        // The counter's last move, then a published reading of it.
        while fake.power_clock() < off + ENERGY_QUANTUM {
            std::thread::sleep(Duration::from_millis(5));
        }
        wait_for_power_reads(&fake, 1);
        let after_mj = fake.current_energy(0);
        drop(epoch);
        Drawn {
            before_mj,
            after_mj,
        }
    });
    telemetry.shutdown().expect("clean shutdown");
    drawn
}

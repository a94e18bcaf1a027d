//! On a machine with an AMD GPU and no NVIDIA library, with no setting, spans carry
//! `gpu.memory.*` from amdgpu's sysfs files and `gpu.process.memory.*` from this process's
//! own fdinfo, exactly as on NVIDIA; the gauges name the vendor and the device. The
//! machine is a tree written by the test, whose files change while the steps run.

use gpuspan_test_support as support;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use gpuspan::Telemetry;
use support::receiver::Receiver;
use support::sampling::{latest_device_point, triple};
use support::setup;

const MIB: u64 = 1 << 20;
const PDEV: &str = "0000:03:00.0";
const UUID: &str = "GPU-2a8c4c9f3b6e1d52";

/// A machine with one amdgpu device, and this process one client of it.
struct Machine {
    root: tempfile::TempDir,
}

impl Machine {
    fn new(used: u64, mine: u64) -> Self {
        let machine = Self {
            root: tempfile::tempdir().expect("temporary directory"),
        };
        let device = machine.device();
        std::fs::create_dir_all(&device).unwrap();
        std::fs::write(
            device.join("uevent"),
            format!("DRIVER=amdgpu\nPCI_ID=1002:74A1\nPCI_SLOT_NAME={PDEV}\n"),
        )
        .unwrap();
        std::fs::write(device.join("unique_id"), "2a8c4c9f3b6e1d52\n").unwrap();
        std::fs::write(device.join("mem_info_vram_total"), "206141652992\n").unwrap();
        std::fs::write(device.join("gpu_busy_percent"), "12\n").unwrap();
        std::fs::create_dir_all(machine.fdinfo_dir()).unwrap();
        machine.set(used, mine);
        machine
    }

    fn sysfs(&self) -> PathBuf {
        self.root.path().join("sys")
    }

    fn procfs(&self) -> PathBuf {
        self.root.path().join("proc")
    }

    fn device(&self) -> PathBuf {
        self.sysfs().join("class/drm/card0/device")
    }

    fn fdinfo_dir(&self) -> PathBuf {
        self.procfs().join(format!("{}/fdinfo", std::process::id()))
    }

    /// The device's used memory and this process's, as the kernel would show them next.
    fn set(&self, used: u64, mine: u64) {
        replace(
            &self.device().join("mem_info_vram_used"),
            &format!("{used}\n"),
        );
        replace(
            &self.fdinfo_dir().join("5"),
            &format!(
                "pos:\t0\nflags:\t02100002\ndrm-driver:\tamdgpu\ndrm-pdev:\t{PDEV}\n\
                 drm-client-id:\t12\ndrm-memory-vram:\t{} KiB\ndrm-resident-vram:\t{} KiB\n\
                 drm-resident-gtt:\t4096 KiB\n",
                mine / 1024 + 7,
                mine / 1024
            ),
        );
    }
}

/// Writes aside and renames, so a read never sees half a file.
fn replace(path: &Path, text: &str) {
    let aside = path.with_extension("new");
    std::fs::write(&aside, text).unwrap();
    std::fs::rename(&aside, path).unwrap();
}

/// Waits until the sampler has taken `n` more samples, all begun after this call.
fn wait_samples(telemetry: &Telemetry, n: u64) {
    let taken = || telemetry.sampler_stats().map_or(0, |s| s.samples);
    let target = taken() + n + 1;
    let deadline = Instant::now() + Duration::from_secs(30);
    while taken() < target {
        assert!(Instant::now() < deadline, "the sampler stopped sampling");
        std::thread::sleep(Duration::from_micros(200));
    }
}

fn builder(receiver: &Receiver, machine: &Machine, interval: Duration) -> gpuspan::Builder {
    setup::to_receiver(receiver)
        .sysfs_root(machine.sysfs())
        .procfs_root(machine.procfs())
        .sample_interval(interval)
}

#[test]
fn start_end_and_peak_follow_the_files_exactly() {
    let machine = Machine::new(1000 * MIB, 100 * MIB);
    let receiver = Receiver::start_grpc();
    let builder = builder(&receiver, &machine, Duration::from_millis(2));
    let (telemetry, ()) = setup::run(builder, |telemetry| {
        assert_eq!(telemetry.memory_source(), Some("amdgpu-sysfs"));
        wait_samples(telemetry, 2);
        let _step = gpuspan::step_span!(7);
        wait_samples(telemetry, 2);
        machine.set(5000 * MIB + 3, 3000 * MIB);
        wait_samples(telemetry, 2);
        machine.set(2000 * MIB, 1500 * MIB);
        wait_samples(telemetry, 2);
    });
    telemetry.shutdown().expect("clean shutdown");

    let steps = receiver.spans_named("step");
    assert_eq!(steps.len(), 1);
    let step = &steps[0];
    assert_eq!(step.str_attr("gpu.memory.source"), Some("amdgpu-sysfs"));
    assert_eq!(
        triple(step, "gpu.memory"),
        Some((1000 * MIB, 2000 * MIB, 5000 * MIB + 3))
    );
    assert_eq!(
        triple(step, "gpu.process.memory"),
        Some((100 * MIB, 1500 * MIB, 3000 * MIB)),
        "drm-resident-vram, never the older key, never gtt"
    );

    let usage = receiver.points_named("hw.gpu.memory.usage");
    let point = latest_device_point(&usage, UUID).expect("a usage point for the AMD device");
    assert_eq!(point.str_attr("hw.vendor"), Some("AMD"));
    assert_eq!(point.str_attr("hw.id"), Some(UUID));
    assert_eq!(point.as_int(), Some((2000 * MIB) as i64));
    let limit = receiver.points_named("hw.gpu.memory.limit");
    let point = latest_device_point(&limit, UUID).expect("a limit point for the AMD device");
    assert_eq!(point.as_int(), Some(206_141_652_992));
}

#[test]
fn a_60_ms_spike_at_5_ms_sampling_is_in_its_step() {
    const RUNS: u64 = 8;
    let interval = Duration::from_millis(5);
    let base = 2048 * MIB + 17;
    let machine = Machine::new(base, 10 * MIB);
    let receiver = Receiver::start_grpc();
    let builder = builder(&receiver, &machine, interval);
    let (telemetry, missed) = setup::run(builder, |telemetry| {
        let mut missed = Vec::new();
        for run in 0..RUNS {
            let before = telemetry.sampler_stats().unwrap().max_gap;
            let _step = gpuspan::step_span!(run);
            wait_samples(telemetry, 1);
            machine.set(base + (RUNS - run) * MIB + 1, (20 + run) * MIB);
            std::thread::sleep(Duration::from_millis(60));
            machine.set(base, 10 * MIB);
            wait_samples(telemetry, 2);
            let after = telemetry.sampler_stats().unwrap().max_gap;
            if after > before && after >= Duration::from_millis(60) {
                missed.push(run);
            }
        }
        missed
    });
    telemetry.shutdown().expect("clean shutdown");

    let steps = receiver.spans_named("step");
    assert_eq!(steps.len(), RUNS as usize);
    for step in &steps {
        let run = step.int_attr("ml.step").unwrap() as u64;
        if missed.contains(&run) {
            eprintln!("run {run}: the sampler fell 60 ms behind: not judged");
            continue;
        }
        let (start, end, peak) = triple(step, "gpu.memory").expect("gpu.memory.*");
        assert_eq!((start, end), (base, base), "run {run}");
        assert_eq!(
            peak,
            base + (RUNS - run) * MIB + 1,
            "run {run}: spike missed"
        );
        let (_, _, process_peak) = triple(step, "gpu.process.memory").unwrap();
        assert_eq!(process_peak, (20 + run) * MIB, "run {run}");
    }
    assert!(
        missed.len() <= RUNS as usize / 3,
        "too busy a machine to judge: {missed:?}"
    );
}

//! The sampler's share of a core with 8 AMD GPUs at 5 ms, read from the kernel's files,
//! against 8 fake NVML devices at 5 ms in the same sitting.
//!
//! The AMD machine is a tree written to a temporary directory and given as the sysfs and
//! procfs roots: 8 amdgpu cards (`mem_info_vram_used`, `mem_info_vram_total`,
//! `gpu_busy_percent`, `uevent`, `unique_id`), and this process with one client on each
//! card's render node (`<procfs>/<pid>/fd/<n>` linked to `/dev/dri/renderD<128 + card>`,
//! its fdinfo with amdgpu's full set of keys) beside stdin, stdout and stderr. At every
//! tick the sampler reads 8 `mem_info_vram_used` and 8 fdinfo files, `gpu_busy_percent` every
//! 100 ms and looks through the fds every 250 ms. NVML's side is the fake library answering
//! from memory, with its per-process lists on their own thread (`gpuspan-procs`).
//!
//! Each configuration builds gpuspan with no exporter, so the sampler (and NVML's process
//! lister) are the only threads it starts, and reads their CPU clocks (`clock_gettime` on
//! the kernel's per-thread CPU clock) over a window of wall time: CPU / wall is the share
//! of one core. The two sources take turns, three rounds each, after a thread that only
//! wakes on the same schedule (the floor any sampler pays for its wake-ups).
//!
//! The written tree costs the file system's reads and the parsing; a real kernel also
//! builds each fdinfo text (amdgpu walks the client's buffer objects under its VM lock) and
//! answers `mem_info_vram_used` from the driver's counters, which this leaves out.
//!
//! `cargo bench --bench drm_sampler_cost` (GPUSPAN_BENCH_WINDOW_S=seconds per round,
//! default 5).

#[path = "common/mod.rs"]
mod common;
use gpuspan_test_support::fake_nvml::FakeNvml;
use gpuspan_test_support::idle_ticker::IdleTicker;

use std::path::Path;
use std::time::{Duration, Instant};

use gpuspan::settings::Exporter;
use gpuspan::Telemetry;

const DEVICES: u32 = 8;
const INTERVAL: Duration = Duration::from_millis(5);
const ROUNDS: usize = 3;
const SAMPLER: &str = "gpuspan-sampler";
const PROCESSES: &str = "gpuspan-procs";
const IDLE: &str = "idle-ticker";
const GIB: u64 = 1 << 30;

/// 8 amdgpu cards under `<root>/sys`, and this process one client of each under
/// `<root>/proc/<pid>`.
fn write_machine(root: &Path) {
    let pid = std::process::id();
    let fd = root.join(format!("proc/{pid}/fd"));
    let fdinfo = root.join(format!("proc/{pid}/fdinfo"));
    std::fs::create_dir_all(&fd).unwrap();
    std::fs::create_dir_all(&fdinfo).unwrap();
    for n in 0..3 {
        std::os::unix::fs::symlink("/dev/pts/0", fd.join(n.to_string())).unwrap();
        std::fs::write(
            fdinfo.join(n.to_string()),
            "pos:\t0\nflags:\t02\nmnt_id:\t26\n",
        )
        .unwrap();
    }
    for card in 0..DEVICES {
        let pdev = format!("0000:{:02x}:00.0", 0x03 + card * 0x10);
        let device = root.join(format!("sys/class/drm/card{card}/device"));
        std::fs::create_dir_all(&device).unwrap();
        let file = |name: &str, text: String| std::fs::write(device.join(name), text).unwrap();
        file(
            "uevent",
            format!("DRIVER=amdgpu\nPCI_CLASS=38000\nPCI_ID=1002:74A1\nPCI_SLOT_NAME={pdev}\n"),
        );
        file(
            "unique_id",
            format!("{:016x}\n", 0x2a8c_4c9f_3b6e_1d00 + u64::from(card)),
        );
        file("mem_info_vram_total", format!("{}\n", 192 * GIB));
        file(
            "mem_info_vram_used",
            format!("{}\n", (10 + u64::from(card)) * GIB),
        );
        file("gpu_busy_percent", "37\n".to_owned());
        let n = 3 + card;
        std::os::unix::fs::symlink(
            format!("/dev/dri/renderD{}", 128 + card),
            fd.join(n.to_string()),
        )
        .unwrap();
        let kib = (8 + u64::from(card)) * GIB / 1024;
        std::fs::write(
            fdinfo.join(n.to_string()),
            format!(
                "pos:\t0\nflags:\t02100002\nmnt_id:\t26\nino:\t1085\ndrm-driver:\tamdgpu\n\
                 drm-pdev:\t{pdev}\ndrm-client-id:\t{n}\npasid:\t32770\n\
                 drm-memory-vram:\t{kib} KiB\ndrm-memory-gtt:\t2048 KiB\n\
                 drm-memory-cpu:\t0 KiB\ndrm-total-vram:\t{kib} KiB\ndrm-shared-vram:\t0\n\
                 drm-active-vram:\t0\ndrm-resident-vram:\t{kib} KiB\n\
                 drm-purgeable-vram:\t0\ndrm-total-gtt:\t2048 KiB\n\
                 drm-resident-gtt:\t2048 KiB\ndrm-engine-gfx:\t1273612 ns\n\
                 drm-engine-compute:\t93612 ns\namd-memory-visible-vram:\t0\n"
            ),
        )
        .unwrap();
    }
}

/// A thread that keeps the sampler's schedule and does nothing else: its share of a core.
fn idle_share(window: Duration) -> f64 {
    let ticker = IdleTicker::start(IDLE, INTERVAL);
    std::thread::sleep(Duration::from_millis(50));
    let cpu0 = common::threads_cpu(IDLE);
    let t0 = Instant::now();
    std::thread::sleep(window);
    let share = (common::threads_cpu(IDLE) - cpu0).as_secs_f64() / t0.elapsed().as_secs_f64();
    drop(ticker);
    share
}

/// One round's figures.
struct Round {
    /// The sampler thread's share of one core.
    sampler: f64,
    /// The sampler's and NVML's process lister's, together.
    both: f64,
    micros_per_tick: f64,
    ticks_per_second: f64,
    max_gap_ms: f64,
}

fn round(builder: gpuspan::Builder, source: &str, window: Duration) -> Round {
    let telemetry = builder
        .summary(false)
        .flush_on_signal(false)
        .sample_interval(INTERVAL)
        .traces_exporter(Exporter::None)
        .metrics_exporter(Exporter::None)
        .build()
        .expect("gpuspan builds");
    assert_eq!(
        telemetry.devices().len(),
        DEVICES as usize,
        "devices in scope"
    );
    let read = telemetry.memory_source().unwrap_or_default();
    assert!(
        read.starts_with(source),
        "{source}: the source read is {read}"
    );
    // Past the first look through the fds and the first process lists.
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(
        common::threads_named(SAMPLER).len(),
        1,
        "one sampler thread"
    );
    let ticks0 = telemetry.sampler_stats().map_or(0, |s| s.samples);
    let sampler0 = common::threads_cpu(SAMPLER);
    let processes0 = common::threads_cpu(PROCESSES);
    let t0 = Instant::now();
    std::thread::sleep(window);
    let wall = t0.elapsed().as_secs_f64();
    let sampler = common::threads_cpu(SAMPLER) - sampler0;
    let processes = common::threads_cpu(PROCESSES) - processes0;
    let stats = telemetry.sampler_stats().expect("sampler stats");
    telemetry.shutdown().expect("shutdown");
    let ticks = stats.samples - ticks0;
    Round {
        sampler: sampler.as_secs_f64() / wall,
        both: (sampler + processes).as_secs_f64() / wall,
        micros_per_tick: sampler.as_secs_f64() * 1e6 / ticks.max(1) as f64,
        ticks_per_second: ticks as f64 / wall,
        max_gap_ms: stats.max_gap.as_secs_f64() * 1e3,
    }
}

fn main() {
    let window = common::window(Duration::from_secs(5), Duration::from_millis(300));
    let machine = tempfile::tempdir().expect("temporary directory");
    write_machine(machine.path());
    let fake = FakeNvml::build();
    fake.set_device_count(DEVICES);
    fake.set_processes(0, &[(std::process::id(), GIB)]);
    println!(
        "sampler cost, {DEVICES} devices at {INTERVAL:?}: {} s a round, {ROUNDS} rounds a source",
        window.as_secs_f64()
    );
    println!("before: {}", common::machine());
    println!(
        "a thread that only wakes every {INTERVAL:?}: {:.3} % of a core",
        idle_share(window) * 100.0
    );
    println!(
        "{:>14} {:>6} {:>13} {:>20} {:>9} {:>8} {:>11} {:>6}",
        "source",
        "round",
        "sampler %cpu",
        "with procs %cpu",
        "µs/tick",
        "ticks/s",
        "max gap ms",
        "load1"
    );
    let mut nvml = Vec::new();
    let mut amd = Vec::new();
    for n in 1..=ROUNDS {
        for (name, source, rows) in [
            ("nvml (fake)", "nvml", &mut nvml),
            ("amdgpu-sysfs", "amdgpu-sysfs", &mut amd),
        ] {
            let builder = if source == "nvml" {
                Telemetry::builder().nvml_lib(fake.path())
            } else {
                Telemetry::builder()
                    .nvml_lib(machine.path().join("no-nvml/libnvidia-ml.so.1"))
                    .sysfs_root(machine.path().join("sys"))
                    .procfs_root(machine.path().join("proc"))
            };
            let r = round(builder, source, window);
            println!(
                "{:>14} {:>6} {:>12.3}% {:>19.3}% {:>9.1} {:>8.1} {:>11.2} {:>6}",
                name,
                n,
                r.sampler * 100.0,
                r.both * 100.0,
                r.micros_per_tick,
                r.ticks_per_second,
                r.max_gap_ms,
                common::load().split(' ').next().unwrap_or("?"),
            );
            rows.push(r);
        }
    }
    let median = |rows: &[Round], f: fn(&Round) -> f64| {
        common::median(&rows.iter().map(f).collect::<Vec<_>>())
    };
    println!(
        "median: amdgpu-sysfs {:.3} % of a core ({:.1} µs a tick), nvml (fake) {:.3} % \
         ({:.3} % with its process lister): {:.2}x the sampler thread, {:.2}x with the lister",
        median(&amd, |r| r.sampler) * 100.0,
        median(&amd, |r| r.micros_per_tick),
        median(&nvml, |r| r.sampler) * 100.0,
        median(&nvml, |r| r.both) * 100.0,
        median(&amd, |r| r.sampler) / median(&nvml, |r| r.sampler),
        median(&amd, |r| r.both) / median(&nvml, |r| r.both),
    );
    println!("after: load average {}", common::load());
}

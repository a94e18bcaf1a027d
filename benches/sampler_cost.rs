//! CPU the sampler thread uses per second of sampling, at 1, 5, 10 and 100 ms with 1 and 8
//! fake NVML devices.
//!
//! Each configuration builds gpuspan with no exporter (traces and metrics `none`), so the
//! only thread it starts is `gpuspan-sampler`, and reads that thread's CPU clock
//! (`clock_gettime` on the kernel's per-thread CPU clock, nanosecond resolution) over a
//! window of wall time. The ratio CPU / wall is the share of one core.
//!
//! Baseline, measured in the same process right before: a thread named
//! `idle-ticker` that wakes on the same schedule with `park_timeout` and does nothing,
//! which is the floor any sampler thread pays for its wake-ups.
//!
//! The fake library answers from memory; a real driver's `nvmlDeviceGetMemoryInfo` and
//! process queries go through `ioctl`s into the kernel module and cost more per device (see
//! BENCHMARKS.md). The figures here are what gpuspan itself costs.
//!
//! `cargo bench --bench sampler_cost` (GPUSPAN_BENCH_WINDOW_S=seconds per configuration,
//! default 5; GPUSPAN_BENCH_REAL_NVML=1 to read the system's NVML devices instead of the
//! fake, on a machine with NVIDIA GPUs).

#[path = "common/mod.rs"]
mod common;
use gpuspan_test_support::fake_nvml;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use gpuspan::Telemetry;

use gpuspan::settings::Exporter;

use fake_nvml::FakeNvml;

const SAMPLER: &str = "gpuspan-sampler";
const IDLE: &str = "idle-ticker";

/// CPU share of one core of the threads named `name` over `window`.
fn share(name: &str, window: Duration) -> (f64, Duration) {
    let cpu0 = common::threads_cpu(name);
    let t0 = Instant::now();
    std::thread::sleep(window);
    let cpu = common::threads_cpu(name) - cpu0;
    let wall = t0.elapsed();
    (cpu.as_secs_f64() / wall.as_secs_f64(), cpu)
}

/// A thread that keeps the sampler's schedule and does nothing else.
fn idle_ticker(interval: Duration) -> (Arc<AtomicBool>, std::thread::JoinHandle<u64>) {
    let stop = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&stop);
    let handle = std::thread::Builder::new()
        .name(IDLE.into())
        .spawn(move || {
            let mut next = Instant::now() + interval;
            let mut ticks = 0u64;
            while !flag.load(Ordering::Relaxed) {
                let now = Instant::now();
                if now < next {
                    std::thread::park_timeout(next - now);
                    continue;
                }
                ticks += 1;
                next += interval;
                let now = Instant::now();
                if next < now {
                    next = now + interval;
                }
            }
            ticks
        })
        .expect("spawn the idle ticker");
    (stop, handle)
}

fn main() {
    let window = common::window(Duration::from_secs(5), Duration::from_millis(300));
    // GPUSPAN_BENCH_REAL_NVML=1: the system's NVML and its first 1 and (where there are
    // that many) 8 devices, on a machine with NVIDIA GPUs, instead of the fake library.
    let real = std::env::var_os("GPUSPAN_BENCH_REAL_NVML").is_some();
    let device_counts: Vec<u32> = if real {
        let available = Telemetry::builder()
            .summary(false)
            .flush_on_signal(false)
            .traces_exporter(Exporter::None)
            .metrics_exporter(Exporter::None)
            .build()
            .expect("gpuspan builds")
            .devices()
            .len() as u32;
        [1, 8].into_iter().filter(|&n| n <= available).collect()
    } else {
        vec![1, 8]
    };
    println!(
        "sampler cost: {} s per configuration, {}",
        window.as_secs_f64(),
        if real {
            "system NVML"
        } else {
            "fake NVML library"
        }
    );
    println!("before: {}", common::machine());
    println!(
        "{:>8} {:>7} {:>12} {:>12} {:>10} {:>12} {:>12} {:>11} {:>10}",
        "interval",
        "devices",
        "sampler %cpu",
        "idle %cpu",
        "ratio",
        "µs/tick",
        "ticks/s",
        "max gap ms",
        "load1"
    );
    for interval_ms in [1u64, 5, 10, 100] {
        let interval = Duration::from_millis(interval_ms);
        for devices in device_counts.iter().copied() {
            // Baseline: the wake-ups alone.
            let (stop, idle) = idle_ticker(interval);
            std::thread::sleep(Duration::from_millis(50));
            let (idle_share, _) = share(IDLE, window);
            stop.store(true, Ordering::Relaxed);
            idle.thread().unpark();
            idle.join().expect("idle ticker");

            let fake = (!real).then(|| {
                let fake = FakeNvml::build();
                fake.set_device_count(devices);
                fake
            });
            let mut builder = Telemetry::builder()
                .summary(false)
                .flush_on_signal(false)
                .sample_interval(interval)
                .traces_exporter(Exporter::None)
                .metrics_exporter(Exporter::None);
            if let Some(fake) = &fake {
                builder = builder.nvml_lib(fake.path());
            } else {
                builder = builder.devices(
                    (0..devices)
                        .map(|d| d.to_string())
                        .collect::<Vec<_>>()
                        .join(","),
                );
            }
            let telemetry = builder.build().expect("gpuspan builds");
            assert_eq!(
                telemetry.devices().len(),
                devices as usize,
                "devices in scope (source {:?})",
                telemetry.memory_source()
            );
            // The thread names itself once it runs.
            std::thread::sleep(Duration::from_millis(50));
            assert_eq!(
                common::threads_named(SAMPLER).len(),
                1,
                "exactly one sampler thread runs"
            );
            let ticks0 = telemetry.sampler_stats().map_or(0, |s| s.samples);
            let (sampler_share, cpu) = share(SAMPLER, window);
            let stats = telemetry.sampler_stats().expect("sampler stats");
            let ticks = stats.samples - ticks0;
            telemetry.shutdown().expect("shutdown");
            println!(
                "{:>6}ms {:>7} {:>11.3}% {:>11.3}% {:>9.1}x {:>12.2} {:>12.1} {:>11.2} {:>10}",
                interval_ms,
                devices,
                sampler_share * 100.0,
                idle_share * 100.0,
                sampler_share / idle_share,
                cpu.as_secs_f64() * 1e6 / ticks.max(1) as f64,
                ticks as f64 / window.as_secs_f64(),
                stats.max_gap.as_secs_f64() * 1e3,
                common::load().split(' ').next().unwrap_or("?"),
            );
        }
    }
    if !real {
        realistic(window.max(Duration::from_secs(1)));
    }
    println!("after: load average {}", common::load());
}

/// The cadence against a driver that costs what a real one does (the fake with a real
/// driver's latencies, `FakeNvml::set_realistic_latencies`: a memory read 12 µs, spun; a
/// process list 4.5 ms per call, slept, holding the fake's driver lock): memory rounds
/// kept out of those scheduled (counted in the fake), the CPU of both sampler threads, how
/// often each device's processes were listed, and the share of the time the driver lock
/// was held.
fn realistic(window: Duration) {
    let interval = Duration::from_millis(5);
    println!("with a real driver's latencies, at {interval:?}, {window:?} per configuration:");
    println!(
        "{:>7} {:>10} {:>12} {:>14} {:>11} {:>14} {:>11} {:>6}",
        "devices",
        "kept",
        "sampler %cpu",
        "processes %cpu",
        "max gap ms",
        "process every",
        "lock held",
        "load1"
    );
    for devices in [1u32, 8] {
        let fake = FakeNvml::build();
        fake.set_device_count(devices);
        fake.set_processes(0, &[(std::process::id(), 1 << 30)]);
        fake.set_realistic_latencies();
        let telemetry = Telemetry::builder()
            .summary(false)
            .flush_on_signal(false)
            .sample_interval(interval)
            .traces_exporter(Exporter::None)
            .metrics_exporter(Exporter::None)
            .nvml_lib(fake.path())
            .build()
            .expect("gpuspan builds");
        // Past the first round of lists.
        std::thread::sleep(Duration::from_millis(300));
        let reads0 = fake.call_count("nvmlDeviceGetMemoryInfo_v2");
        let held0 = fake.driver_lock_held();
        let cpu0 = common::threads_cpu(SAMPLER) + common::threads_cpu("gpuspan-procs");
        let processes0 = common::threads_cpu("gpuspan-procs");
        let t0 = Instant::now();
        std::thread::sleep(window);
        let wall = t0.elapsed();
        let processes = common::threads_cpu("gpuspan-procs") - processes0;
        let cpu =
            common::threads_cpu(SAMPLER) + common::threads_cpu("gpuspan-procs") - cpu0 - processes;
        let rounds = (fake.call_count("nvmlDeviceGetMemoryInfo_v2") - reads0) / u64::from(devices);
        let held = fake.driver_lock_held() - held0;
        let stats = telemetry.sampler_stats().expect("sampler stats");
        telemetry.shutdown().expect("shutdown");
        let scheduled = wall.as_secs_f64() / interval.as_secs_f64();
        println!(
            "{:>7} {:>9.1}% {:>11.3}% {:>13.3}% {:>11.2} {:>14} {:>10.2}% {:>6}",
            devices,
            100.0 * rounds as f64 / scheduled,
            100.0 * cpu.as_secs_f64() / wall.as_secs_f64(),
            100.0 * processes.as_secs_f64() / wall.as_secs_f64(),
            stats.max_gap.as_secs_f64() * 1e3,
            format!("{:.0?}", stats.process_interval.unwrap_or_default()),
            100.0 * held.as_secs_f64() / wall.as_secs_f64(),
            common::load().split(' ').next().unwrap_or("?"),
        );
    }
}

//! Sampler CPU of one node of 8 devices, two ways: 8 ranks each sampling its own device
//! (`LOCAL_RANK`, as every rank of a job does by default), against one `gpuspan collect`
//! sampling all 8 for the node. The fake NVML costs what a real driver does
//! (`GPUSPAN_TEST_FAKE_LATENCY=realistic`: 12 µs a memory read, 4.5 ms a process list).
//!
//! Every process is a child, measured from outside the same way: after a second of warm-up,
//! the CPU of its threads named `gpuspan-sampler` and `gpuspan-procs`, from
//! `/proc/<pid>/task/<tid>/stat`, over a window of wall time. The ranks are this binary
//! again, each with a gpuspan that exports nothing and sleeps.
//!
//! `cargo bench -p gpuspan-cli --bench node_sampling` (GPUSPAN_BENCH_WINDOW_S=seconds,
//! default 10).

#[path = "../../benches/common/mod.rs"]
mod common;
use gpuspan_test_support::fake_nvml::{FakeNvml, LATENCY_VAR};
use gpuspan_test_support::servers::free_port;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const DEVICES: u32 = 8;
const THREADS: [&str; 2] = ["gpuspan-sampler", "gpuspan-procs"];

fn window() -> Duration {
    common::window(Duration::from_secs(10), Duration::from_millis(500))
}

/// CPU time of `pid`'s threads named one of [`THREADS`] so far.
fn sampler_cpu(pid: u32) -> Duration {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return Duration::ZERO;
    };
    tasks
        .flatten()
        .filter(|task| {
            let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
            THREADS.contains(&comm.trim_end())
        })
        .filter_map(|task| common::stat_cpu(&task.path().join("stat").to_string_lossy()))
        .sum()
}

/// The share of one core the children's sampler threads used over the window.
fn measure(children: &mut [Child]) -> f64 {
    std::thread::sleep(Duration::from_secs(1));
    for child in children.iter_mut() {
        assert!(child.try_wait().unwrap().is_none(), "a child ended early");
    }
    let pids: Vec<u32> = children.iter().map(Child::id).collect();
    let before: Duration = pids.iter().map(|&p| sampler_cpu(p)).sum();
    let started = Instant::now();
    std::thread::sleep(window());
    let after: Duration = pids.iter().map(|&p| sampler_cpu(p)).sum();
    let share = (after - before).as_secs_f64() / started.elapsed().as_secs_f64();
    for child in children.iter_mut() {
        let _ = child.kill();
        let _ = child.wait();
    }
    share
}

/// A rank: gpuspan sampling its own device, exporting nothing, until killed.
fn rank() {
    let telemetry = gpuspan::Telemetry::builder()
        .traces_exporter(gpuspan::settings::Exporter::None)
        .metrics_exporter(gpuspan::settings::Exporter::None)
        .summary(false)
        .flush_on_signal(false)
        .build()
        .expect("gpuspan builds");
    assert_eq!(
        telemetry.devices().len(),
        1,
        "a rank samples its own device"
    );
    std::thread::sleep(Duration::from_secs(3600));
}

fn main() {
    if common::child_config().as_deref() == Some("rank") {
        rank();
        return;
    }
    let fake = FakeNvml::build();
    let runs = tempfile::tempdir().expect("a temporary directory");
    let node = |command: &mut Command| {
        command
            .env("GPUSPAN_NVML_LIB", fake.path())
            .env("FAKE_NVML_DEVICES", DEVICES.to_string())
            .env(LATENCY_VAR, "realistic")
            .env("GPUSPAN_RUN_DIR", runs.path())
            .env("GPUSPAN_RUN_ID", "node")
            .stdout(Stdio::null())
            .stderr(Stdio::null());
    };

    let mut ranks: Vec<Child> = (0..DEVICES)
        .map(|local| {
            let mut command = common::child("rank");
            node(&mut command);
            command
                .env("RANK", local.to_string())
                .env("LOCAL_RANK", local.to_string())
                .env("WORLD_SIZE", DEVICES.to_string());
            command.spawn().expect("a rank starts")
        })
        .collect();
    let ranks_share = measure(&mut ranks);

    let mut command = Command::new(env!("CARGO_BIN_EXE_gpuspan"));
    command
        .arg("collect")
        .arg("--grpc")
        .arg(format!("127.0.0.1:{}", free_port()))
        .arg("--http")
        .arg(format!("127.0.0.1:{}", free_port()));
    node(&mut command);
    let mut collect = [command.spawn().expect("gpuspan collect starts")];
    let collect_share = measure(&mut collect);

    println!(
        "node sampling: {DEVICES} fake devices at a real driver's latencies, 5 ms, {:.0} s window, {}",
        window().as_secs_f64(),
        common::machine()
    );
    println!("load: {}", common::load());
    println!("| who samples | sampler threads' CPU, share of one core | against the node agent |");
    println!("|---|---|---|");
    println!(
        "| {DEVICES} ranks, each its own device | {:.2} % ({:.2} % a rank) | {:.2}x |",
        100.0 * ranks_share,
        100.0 * ranks_share / f64::from(DEVICES),
        ranks_share / collect_share
    );
    println!(
        "| one `gpuspan collect` for the node | {:.2} % | 1 |",
        100.0 * collect_share
    );
}

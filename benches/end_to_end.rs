//! End to end: the `train` example for 10,000 steps (`--epochs 10 --steps 1000
//! --batch-size 8 --hidden 16`), with `OTEL_SDK_DISABLED=true` against gpuspan enabled
//! (the default run directory, in a temporary directory), with no GPU source and with the
//! fake NVML library (1 device), and with both exporters `none` (spans and sampler on the
//! training side, nothing written), which tells the training thread's share from the
//! export's. Wall time and CPU time (user + system, `getrusage` of the
//! waited-for child) per run; the configurations take turns, round after round, and the
//! ratios are medians of per-round ratios against the disabled run of the same round. Each
//! configuration also runs with `--steps 0` (start-up, 10 empty epochs, shutdown), so the
//! cost per step can be told apart from the fixed cost of starting and stopping.
//!
//! Needs the release example: `cargo build --release --example train` first (running cargo
//! from inside `cargo bench` would wait on its own build lock).
//!
//! `cargo build --release --example train && cargo bench --bench end_to_end`
//! (GPUSPAN_BENCH_ROUNDS=rounds, default 7).

#[path = "common/mod.rs"]
mod common;
use gpuspan_test_support::fake_nvml;

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use fake_nvml::FakeNvml;

fn train_binary() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target"));
    let binary = target.join("release").join("examples").join("train");
    assert!(
        binary.exists(),
        "{} is missing: run `cargo build --release --example train` first",
        binary.display()
    );
    binary
}

struct Run {
    wall: Duration,
    cpu: Duration,
}

fn run(binary: &PathBuf, args: &[&str], envs: &[(&str, String)]) -> Run {
    let dir = tempfile::tempdir().expect("temporary directory");
    let mut command = Command::new(binary);
    command.args(args).current_dir(dir.path());
    for (key, _) in std::env::vars() {
        if key.starts_with("OTEL_")
            || key.starts_with("GPUSPAN_")
            || key.starts_with("FAKE_NVML_")
            || key == "CUDA_VISIBLE_DEVICES"
            || key == "RUST_LOG"
        {
            command.env_remove(key);
        }
    }
    command.env("GPUSPAN_RUN_DIR", dir.path().join("runs"));
    for (key, value) in envs {
        command.env(key, value);
    }
    let cpu0 = common::children_cpu();
    let start = Instant::now();
    let output = command.output().expect("train runs");
    let wall = start.elapsed();
    let cpu = common::children_cpu() - cpu0;
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "train failed ({}):\n{stderr}",
        output.status
    );
    if stderr.contains("not exported") || stderr.contains("could not export") {
        eprintln!("warning: spans were lost:\n{stderr}");
    }
    Run { wall, cpu }
}

fn main() {
    let full = common::full_run();
    let rounds: usize = std::env::var("GPUSPAN_BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if full { 7 } else { 1 });
    let binary = train_binary();
    let steps_per_epoch = if full { "1000" } else { "100" };
    let args = [
        "--epochs",
        "10",
        "--steps",
        steps_per_epoch,
        "--batch-size",
        "8",
        "--hidden",
        "16",
    ];
    let steps = 10 * steps_per_epoch.parse::<u64>().expect("steps");
    let fake = FakeNvml::build();
    let fake_path = fake.path().display().to_string();
    let configs: Vec<(&str, Vec<(&str, String)>)> = vec![
        ("disabled", vec![("OTEL_SDK_DISABLED", "true".into())]),
        ("enabled, no GPU source", vec![]),
        (
            "enabled, exporters none",
            vec![
                ("OTEL_TRACES_EXPORTER", "none".into()),
                ("OTEL_METRICS_EXPORTER", "none".into()),
            ],
        ),
        (
            "enabled, fake NVML 1 device",
            vec![("GPUSPAN_NVML_LIB", fake_path)],
        ),
    ];
    // The same three with `--steps 0`: start-up and shutdown alone (and 10 epoch spans).
    let idle_args: Vec<&str> = args
        .iter()
        .map(|a| if *a == steps_per_epoch { "0" } else { a })
        .collect();
    println!(
        "end to end: train {} ({steps} steps), {rounds} rounds; also with --steps 0 \
         (start-up and shutdown only)",
        args.join(" ")
    );
    println!("before: {}", common::machine());
    // Warm the page cache and the binary once.
    run(&binary, &args, &configs[0].1);
    let n = configs.len();
    // Index i: configuration i % n, with 10,000 steps for i < n, with 0 steps after.
    let mut walls = vec![Vec::new(); 2 * n];
    let mut cpus = vec![Vec::new(); 2 * n];
    for round in 0..rounds {
        // Rotate the order so no configuration always runs first.
        for k in 0..2 * n {
            let i = (k + round) % (2 * n);
            let a: &[&str] = if i < n { &args } else { &idle_args };
            let r = run(&binary, a, &configs[i % n].1);
            walls[i].push(r.wall.as_secs_f64());
            cpus[i].push(r.cpu.as_secs_f64());
        }
    }
    println!(
        "{:<28} {:>6} {:>10} {:>10} {:>11} {:>10}",
        "configuration", "steps", "wall ms", "cpu ms", "wall ratio", "cpu ratio"
    );
    let ratio = |v: &[Vec<f64>], i: usize, base: usize| {
        let per_round: Vec<f64> = v[i].iter().zip(&v[base]).map(|(x, d)| x / d).collect();
        common::median(&per_round)
    };
    for i in 0..2 * n {
        let base = if i < n { 0 } else { n };
        println!(
            "{:<28} {:>6} {:>10.1} {:>10.1} {:>10.2}x {:>9.2}x",
            configs[i % n].0,
            if i < n { steps } else { 0 },
            common::median(&walls[i]) * 1e3,
            common::median(&cpus[i]) * 1e3,
            ratio(&walls, i, base),
            ratio(&cpus, i, base),
        );
    }
    // Per step, start-up and shutdown taken out: ((enabled - enabled with 0 steps) -
    // (disabled - disabled with 0 steps)) / steps, per round, median.
    println!("added per step, start-up and shutdown taken out (median over rounds):");
    for i in 1..n {
        let marginal = |v: &[Vec<f64>]| {
            let per_round: Vec<f64> = (0..v[i].len())
                .map(|r| ((v[i][r] - v[i + n][r]) - (v[0][r] - v[n][r])) * 1e6 / steps as f64)
                .collect();
            common::median(&per_round)
        };
        let fixed = |v: &[Vec<f64>]| {
            let per_round: Vec<f64> = (0..v[i].len())
                .map(|r| (v[i + n][r] - v[n][r]) * 1e3)
                .collect();
            common::median(&per_round)
        };
        println!(
            "  {:<28} wall {:>6.2} µs/step, cpu {:>6.2} µs/step; start-up + shutdown wall {:>6.1} ms, cpu {:>6.1} ms",
            configs[i].0,
            marginal(&walls),
            marginal(&cpus),
            fixed(&walls),
            fixed(&cpus),
        );
    }
    println!("after: load average {}", common::load());
}

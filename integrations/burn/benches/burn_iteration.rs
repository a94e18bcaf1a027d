//! What gpuspan-burn adds to a burn training iteration: burn as users run it (its default
//! experiment log, no gpuspan) against `Gpuspan::launch` (the same log, plus the epoch,
//! step and validation spans, the sampler and the run directory), side by side.
//!
//! Each side trains in a process of its own (each installs a global subscriber), and the
//! sides alternate, so both see the same machine. Per iteration, medians over the rounds:
//! wall time, the training thread's CPU time (what gpuspan adds to the loop itself), and
//! the whole process's CPU time (gpuspan's own threads included), with their ratios.
//!
//! `cargo bench -p gpuspan-burn --bench burn_iteration` (under `cargo test --benches`, one
//! short round). On a shared 2-core machine these medians move by 10 % from run to run;
//! `burn_iteration_instructions.sh` counts instructions instead, which repeat.

#[path = "../examples/burn_train/regressor.rs"]
mod regressor;

use std::process::Command;
use std::time::{Duration, Instant};

use burn::tensor::Device;
use burn::train::SupervisedTraining;

/// The model sizes timed: (name, features, hidden units, batch).
const SIZES: [(&str, usize, usize, usize); 2] = [("tiny", 8, 32, 16), ("small", 256, 1024, 64)];

/// One training's figures, in nanoseconds per iteration.
#[derive(Clone, Copy)]
struct Figures {
    wall: f64,
    thread_cpu: f64,
    process_cpu: f64,
}

/// One of a training's figures.
type Pick = fn(&Figures) -> f64;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let [_, flag, side, size, iterations] = args.as_slice() {
        if flag == "--child" {
            child(side, size, iterations.parse().expect("iterations"));
            return;
        }
    }
    let full = args.iter().any(|a| a == "--bench");
    let (rounds, iterations) = if full { (9, 300) } else { (1, 20) };
    println!("burn iteration: {rounds} alternating rounds of {iterations} iterations a side");
    println!("per iteration, medians: burn alone / with gpuspan = ratio");
    for (size, ..) in SIZES {
        let (mut alone, mut with) = (Vec::new(), Vec::new());
        for _ in 0..rounds {
            alone.push(run("alone", size, iterations));
            with.push(run("gpuspan", size, iterations));
        }
        let rows: [(&str, Pick); 3] = [
            ("wall", |f| f.wall),
            ("training thread CPU", |f| f.thread_cpu),
            ("process CPU", |f| f.process_cpu),
        ];
        for (what, figure) in rows {
            let a = median(alone.iter().map(figure).collect());
            let w = median(with.iter().map(figure).collect());
            println!(
                "{size:<6} {what:<20} {:>9.1} µs / {:>9.1} µs = {:.3}x",
                a / 1e3,
                w / 1e3,
                w / a
            );
        }
    }
}

/// One training in a child process.
fn run(side: &str, size: &str, iterations: usize) -> Figures {
    let output = Command::new(std::env::current_exe().unwrap())
        .args(["--child", side, size, &iterations.to_string()])
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{side} {size}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let figure = |name: &str| -> f64 {
        stdout
            .lines()
            .find_map(|line| line.strip_prefix(name))
            .and_then(|ns| ns.trim().parse().ok())
            .unwrap_or_else(|| panic!("{side} {size} printed no {name}\n{stdout}"))
    };
    Figures {
        wall: figure("wall ns:"),
        thread_cpu: figure("thread cpu ns:"),
        process_cpu: figure("process cpu ns:"),
    }
}

/// One training of `iterations` iterations (one epoch), measured from launch to return.
fn child(side: &str, size: &str, iterations: usize) {
    let (_, features, hidden, batch) = SIZES
        .into_iter()
        .find(|(name, ..)| *name == size)
        .expect("a size of SIZES");
    let dir = tempfile::tempdir().unwrap();
    let artifacts = dir.path().join("artifacts");
    let device = Device::flex().autodiff();
    let training = SupervisedTraining::new(
        &artifacts,
        regressor::loader(iterations * batch, features, batch, 7),
        regressor::loader(batch, features, batch, 11),
    )
    .num_epochs(1);
    let learner = regressor::learner(features, hidden, &device);
    let gpuspan = (side == "gpuspan").then(|| {
        let builder = gpuspan::Telemetry::builder()
            .run_dir(dir.path().join("runs"))
            .summary(false);
        gpuspan_burn::Gpuspan::with_builder(builder, &artifacts).unwrap()
    });
    let (wall, thread, process) = (Instant::now(), thread_cpu(), process_cpu());
    let result = match &gpuspan {
        Some(gpuspan) => gpuspan.launch(training, learner),
        None => training.launch(learner),
    };
    let per = |d: Duration| d.as_nanos() as f64 / iterations as f64;
    println!("wall ns: {}", per(wall.elapsed()));
    println!("thread cpu ns: {}", per(thread_cpu() - thread));
    println!("process cpu ns: {}", per(process_cpu() - process));
    if let Some(gpuspan) = gpuspan {
        gpuspan.shutdown().unwrap();
    }
    assert!(result.error.is_none());
    let log = std::fs::read_to_string(artifacts.join(gpuspan_burn::EXPERIMENT_LOG)).unwrap();
    let logged = log.matches(": Iteration ").count();
    assert_eq!(logged, iterations, "both sides write burn's log");
}

/// CPU time of the calling thread.
fn thread_cpu() -> Duration {
    clock(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// CPU time of the whole process, every thread (ended ones included).
fn process_cpu() -> Duration {
    clock(libc::CLOCK_PROCESS_CPUTIME_ID)
}

fn clock(id: libc::clockid_t) -> Duration {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid timespec for clock_gettime to write.
    unsafe { libc::clock_gettime(id, &mut now) };
    Duration::new(now.tv_sec as u64, now.tv_nsec as u32)
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

//! A training loop's wall time per `step_span!`, as a user program sees it, and what
//! gpuspan's own threads cost around it.
//!
//! The program is a user's: `gpuspan::init()` from the environment (the default run
//! directory export, `GPUSPAN_RUN_DIR`), then chunks of `CHUNK` steps of
//! `step_span!(i)` taking turns with chunks of an empty loop, `ROUNDS` of each; the figure
//! is the median chunk's time per step. Nothing is flushed between chunks: the export
//! thread works while the loop runs, as it does in a real program.
//!
//! Wall time on a shared machine is noisy, so the same run also reads, from `/proc`, what
//! the kernel accounts to each thread while the steps run (their schedstat and
//! context-switch counts): the training thread's CPU time and time spent waiting for a
//! core per step, and each of gpuspan's threads' CPU time and wake-ups (voluntary context
//! switches: sleeps, lock waits included) per second. CPU time moves far less with other
//! programs' load than wall time does.
//!
//! It uses gpuspan's public API only, so `benches/against_revision.sh` can build this
//! same file against an earlier revision and run the two side by side.
//!
//! `step_wall [ROUNDS] [CHUNK]` (default 30 and 2,000) prints one JSON line. Without
//! arguments under `cargo test --benches` it takes a short pass.

use std::collections::BTreeMap;
use std::hint::black_box;
use std::time::Instant;

/// What the kernel accounts to one thread (`/proc/self/task/<tid>/`).
#[derive(Debug, Clone, Default)]
struct Accounted {
    name: String,
    /// On a core, in ns (schedstat's first field).
    cpu_ns: u64,
    /// Runnable but waiting for a core, in ns (schedstat's second field).
    wait_ns: u64,
    /// The thread went to sleep (it waits for something, then is woken).
    voluntary: u64,
    /// The thread was taken off its core for another.
    involuntary: u64,
}

fn read_task(dir: &std::path::Path) -> Option<Accounted> {
    let name = std::fs::read_to_string(dir.join("comm")).ok()?;
    let schedstat = std::fs::read_to_string(dir.join("schedstat")).ok()?;
    let mut fields = schedstat.split_whitespace().map(|v| v.parse::<u64>().ok());
    let cpu_ns = fields.next()??;
    let wait_ns = fields.next()??;
    let status = std::fs::read_to_string(dir.join("status")).ok()?;
    let count = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .unwrap_or(0)
    };
    Some(Accounted {
        name: name.trim().to_owned(),
        cpu_ns,
        wait_ns,
        voluntary: count("voluntary_ctxt_switches:"),
        involuntary: count("nonvoluntary_ctxt_switches:"),
    })
}

/// Every thread of this process, by thread id.
fn all_threads() -> BTreeMap<u32, Accounted> {
    let mut threads = BTreeMap::new();
    let Ok(entries) = std::fs::read_dir("/proc/self/task") else {
        return threads;
    };
    for entry in entries.flatten() {
        let tid = entry.file_name().to_str().and_then(|t| t.parse().ok());
        if let (Some(tid), Some(accounted)) = (tid, read_task(&entry.path())) {
            threads.insert(tid, accounted);
        }
    }
    threads
}

/// The calling thread.
fn this_thread() -> Accounted {
    read_task(std::path::Path::new("/proc/thread-self")).unwrap_or_default()
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    }
}

/// One step of the user's loop; a function of its own so a profiler can single it out
/// (`valgrind --tool=callgrind --toggle-collect='*one_step*'`).
#[inline(never)]
fn one_step(i: u64) {
    let _step = gpuspan::step_span!(black_box(i));
}

/// One chunk's time per step, in ns.
fn chunk(first: u64, steps: u64, instrumented: bool) -> f64 {
    let start = Instant::now();
    for i in first..first + steps {
        if instrumented {
            one_step(i);
        } else {
            black_box(i);
        }
    }
    start.elapsed().as_nanos() as f64 / steps as f64
}

fn main() {
    let args: Vec<u64> = std::env::args()
        .skip(1)
        .filter_map(|a| a.parse().ok())
        .collect();
    let full = std::env::args().any(|a| a == "--bench");
    let rounds = args.first().copied().unwrap_or(if full { 30 } else { 3 });
    let steps = args.get(1).copied().unwrap_or(2_000);

    // Without a run directory named, a smoke pass writes into a temporary one.
    let scratch = std::env::var_os("GPUSPAN_RUN_DIR").is_none().then(|| {
        let dir = std::env::temp_dir().join(format!("gpuspan-step-wall-{}", std::process::id()));
        std::env::set_var("GPUSPAN_RUN_DIR", &dir);
        dir
    });
    let telemetry = gpuspan::init().expect("gpuspan starts from the environment");
    let devices = telemetry.devices().len();
    let mut next = 0;
    // A warm-up: the span machinery's first allocations, and the export thread running.
    for _ in 0..3 {
        chunk(next, steps, true);
        next += steps;
    }

    let (mut bare, mut stepped) = (Vec::new(), Vec::new());
    let mut training = Accounted::default();
    let before = all_threads();
    let started = Instant::now();
    for _ in 0..rounds {
        bare.push(chunk(0, steps, false));
        let at = this_thread();
        stepped.push(chunk(next, steps, true));
        let after = this_thread();
        next += steps;
        training.cpu_ns += after.cpu_ns - at.cpu_ns;
        training.wait_ns += after.wait_ns - at.wait_ns;
        training.involuntary += after.involuntary - at.involuntary;
    }
    let seconds = started.elapsed().as_secs_f64();
    let after = all_threads();

    // gpuspan's threads, summed by name, over the run (threads that started meanwhile
    // count from zero).
    let own = std::process::id();
    let mut by_name: BTreeMap<String, Accounted> = BTreeMap::new();
    for (tid, end) in &after {
        if *tid == own {
            continue;
        }
        let start = before.get(tid).cloned().unwrap_or_default();
        let sum = by_name.entry(end.name.clone()).or_default();
        sum.cpu_ns += end.cpu_ns.saturating_sub(start.cpu_ns);
        sum.voluntary += end.voluntary.saturating_sub(start.voluntary);
        sum.involuntary += end.involuntary.saturating_sub(start.involuntary);
    }
    let threads: Vec<String> = by_name
        .iter()
        .map(|(name, a)| {
            format!(
                "{name:?}: {{\"cpu_ms_per_s\": {:.3}, \"wakeups_per_s\": {:.1}, \"preempted_per_s\": {:.1}}}",
                a.cpu_ns as f64 / 1e6 / seconds,
                a.voluntary as f64 / seconds,
                a.involuntary as f64 / seconds
            )
        })
        .collect();
    let total_steps = (rounds * steps) as f64;
    let bare_ns = median(&mut bare);
    let step_ns = median(&mut stepped);
    println!(
        "{{\"devices\": {devices}, \"rounds\": {rounds}, \"chunk\": {steps}, \"bare_ns\": {bare_ns:.2}, \"step_ns\": {step_ns:.1}, \"added_ns\": {:.1}, \"training_cpu_ns_per_step\": {:.1}, \"training_wait_ns_per_step\": {:.1}, \"training_preempted\": {}, \"seconds\": {seconds:.3}, \"threads\": {{{}}}}}",
        step_ns - bare_ns,
        training.cpu_ns as f64 / total_steps,
        training.wait_ns as f64 / total_steps,
        training.involuntary,
        threads.join(", ")
    );
    telemetry.shutdown().expect("every span exported");
    if let Some(dir) = scratch {
        let _ = std::fs::remove_dir_all(dir);
    }
}

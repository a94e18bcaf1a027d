//! gpuspan's side of `benches/compare/run.sh`, which runs the same measurements in Python
//! (pynvml and opentelemetry-sdk) against the same fake NVML library.
//!
//! The library is the one `GPUSPAN_NVML_LIB` names (run.sh compiles
//! `tests/fake_nvml/fake_nvml.c` and sets it, with `FAKE_NVML_DEVICES` or
//! `FAKE_NVML_TIMELINE`, which the fake reads at `nvmlInit`). Results are JSON lines on
//! standard output.
//!
//! - `steps N ROUNDS`: per-step time of an empty loop and of `step_span!(i)` (sampler at the
//!   default 5 ms, spans and metrics exported over OTLP/gRPC to an in-process receiver,
//!   metrics at the default 60 s interval), N steps per
//!   round in chunks of 1024 with a flush between chunks outside the timed region (as the
//!   Python side does with `force_flush`); medians over rounds.
//! - `spikes SECONDS`: back-to-back 10 ms steps for SECONDS under gpuspan at its default
//!   5 ms interval, with `gpu.memory.peak` exported every second; prints every distinct
//!   `gpu.memory.peak` seen on a step span and in a metric point, so run.sh can tell which
//!   spikes of the timeline were caught.
//!
//! With `GPUSPAN_BENCH_EXPORT=none`, `steps` sends spans and metrics nowhere instead (spans
//! still pass the export thread and its taps), as the Python side's no-op exporter does.
//!
//! Without arguments (`cargo test --benches`) it runs a short `steps` pass.

#[path = "common/mod.rs"]
mod common;
use gpuspan_test_support::receiver;

use std::collections::BTreeSet;
use std::hint::black_box;
use std::time::{Duration, Instant};

use gpuspan::{Protocol, Telemetry};

use gpuspan::settings::Exporter;
use tracing_subscriber::layer::SubscriberExt;

use receiver::Receiver;

const CHUNK: u64 = 1024;

fn builder(receiver: &Receiver) -> gpuspan::Builder {
    Telemetry::builder()
        .service_name("gpuspan-compare")
        .run_id("compare")
        .summary(false)
        .flush_on_signal(false)
        .endpoint(receiver.endpoint())
        .protocol(Protocol::Grpc)
}

/// One instrumented step; a function of its own so a profiler can single it out
/// (`valgrind --tool=callgrind --toggle-collect='*one_step*'`).
/// With `GPUSPAN_BENCH_SPAN=plain`, a plain `tracing::info_span!("step", ml.step = i)`
/// instead, for profiles of the baseline.
#[inline(never)]
fn one_step(i: u64) {
    if plain() {
        let _s = tracing::info_span!("step", ml.step = black_box(i)).entered();
    } else {
        let _s = gpuspan::step_span!(black_box(i));
    }
}

fn plain() -> bool {
    static PLAIN: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *PLAIN.get_or_init(|| std::env::var("GPUSPAN_BENCH_SPAN").is_ok_and(|v| v == "plain"))
}

fn steps(n: u64, rounds: usize) {
    let receiver = Receiver::start_grpc();
    let nowhere = std::env::var("GPUSPAN_BENCH_EXPORT").is_ok_and(|v| v == "none");
    let exporter = if nowhere {
        Exporter::None
    } else {
        Exporter::Otlp
    };
    let telemetry = builder(&receiver)
        .traces_exporter(exporter)
        .metrics_exporter(exporter)
        .build()
        .expect("gpuspan builds");
    let devices = telemetry.devices().len();
    let subscriber = tracing_subscriber::registry().with(telemetry.layer());
    let _guard = tracing::subscriber::set_default(subscriber);
    let timed = |instrumented: bool| -> f64 {
        let mut total = Duration::ZERO;
        let mut done = 0;
        while done < n {
            let k = CHUNK.min(n - done);
            let start = Instant::now();
            for i in done..done + k {
                if instrumented {
                    one_step(i);
                } else {
                    black_box(i);
                }
            }
            total += start.elapsed();
            done += k;
            if instrumented {
                telemetry.flush().expect("flush");
                receiver.clear();
            }
        }
        total.as_nanos() as f64 / n as f64
    };
    timed(true);
    let (mut empty, mut step) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        empty.push(timed(false));
        step.push(timed(true));
    }
    println!(
        "{{\"lang\": \"rust\", \"span\": {:?}, \"export\": {:?}, \"devices\": {devices}, \"source\": {:?}, \"steps\": {n}, \"rounds\": {rounds}, \"empty_ns\": {:.1}, \"step_ns\": {:.1}}}",
        if plain() { "info_span!" } else { "step_span!" },
        if nowhere { "none" } else { "otlp-grpc" },
        telemetry.memory_source().unwrap_or("none"),
        common::median(&empty),
        common::median(&step)
    );
    drop(_guard);
    telemetry.shutdown().expect("no span dropped");
}

fn spikes(seconds: f64) {
    let receiver = Receiver::start_grpc();
    let telemetry = builder(&receiver)
        .traces_exporter(Exporter::Otlp)
        .metrics_exporter(Exporter::Otlp)
        .metric_export_interval(Duration::from_secs(1))
        .build()
        .expect("gpuspan builds");
    let interval = telemetry.sampler_stats().expect("sampler").interval;
    let subscriber = tracing_subscriber::registry().with(telemetry.layer());
    tracing::subscriber::with_default(subscriber, || {
        let start = Instant::now();
        let mut i = 0u64;
        while start.elapsed().as_secs_f64() < seconds {
            let _s = gpuspan::step_span!(i);
            std::thread::sleep(Duration::from_millis(10));
            i += 1;
        }
    });
    let stats = telemetry.sampler_stats().expect("sampler");
    telemetry.shutdown().expect("nothing dropped");
    let span_peaks: BTreeSet<i64> = receiver
        .spans_named("step")
        .iter()
        .filter_map(|s| s.int_attr("gpu.memory.peak"))
        .collect();
    let metric_peaks: BTreeSet<i64> = receiver
        .points_named("gpu.memory.peak")
        .iter()
        .filter_map(|p| p.as_int())
        .collect();
    let list = |set: &BTreeSet<i64>| {
        set.iter()
            .map(i64::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    };
    println!(
        "{{\"observer\": \"gpuspan\", \"interval_ms\": {}, \"samples\": {}, \"max_gap_ms\": {:.2}, \"span_peaks\": [{}], \"metric_peaks\": [{}]}}",
        interval.as_secs_f64() * 1e3,
        stats.samples,
        stats.max_gap.as_secs_f64() * 1e3,
        list(&span_peaks),
        list(&metric_peaks)
    );
}

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    match args.first().map(String::as_str) {
        Some("steps") => steps(
            args.get(1).and_then(|v| v.parse().ok()).unwrap_or(20_000),
            args.get(2).and_then(|v| v.parse().ok()).unwrap_or(5),
        ),
        Some("spikes") => spikes(args.get(1).and_then(|v| v.parse().ok()).unwrap_or(42.0)),
        Some(other) => panic!("unknown mode {other}: steps N ROUNDS | spikes SECONDS"),
        None => steps(2_048, 1),
    }
}

//! Spans per second through one OpenTelemetry Collector agent (collector/agent.yaml) and one
//! gateway (collector/gateway.yaml), side by side with the same spans sent straight to an
//! OTLP receiver (the baseline), and the collectors' CPU per thousand spans: the figures the
//! guide's scale section (docs/jobs.md, "Many nodes") rests on.
//!
//! Each row: one process's `step_span!` spans (1 fake NVML device, every memory attribute),
//! produced as fast as the training thread goes into an export queue large enough to hold
//! them all, then flushed. Delivered per second = spans / (first span to the last one
//! decoded by the receiver at the end). The gateway's two trace exporters go to two
//! in-process receivers standing for Jaeger and Tempo; the row waits until both hold every
//! span. CPU is each collector process's user + system time over the row, from
//! `/proc/<pid>/stat`. The receivers run in this process, on the same two cores.
//!
//! `cargo bench --bench agent_gateway` (GPUSPAN_BENCH_AGENT_SPANS: spans per row, default
//! 100,000; 2,000 in the quick pass of `cargo test --benches`).

#[path = "common/mod.rs"]
mod common;
use gpuspan_test_support::fake_nvml::FakeNvml;
use gpuspan_test_support::go_stack::Collector;
use gpuspan_test_support::receiver::Receiver;

use std::time::{Duration, Instant};

use tracing_subscriber::layer::SubscriberExt;

fn spans_per_row() -> u64 {
    std::env::var("GPUSPAN_BENCH_AGENT_SPANS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if common::full_run() { 100_000 } else { 2_000 })
}

/// What one row measured.
struct Row {
    seconds: f64,
    agent_cpu: Duration,
    gateway_cpu: Duration,
}

/// Sends `spans` step spans to `endpoint` (OTLP/gRPC) and waits until every receiver in
/// `backends` holds them all; `collectors` are measured over the same time.
fn run(
    fake: &FakeNvml,
    endpoint: &str,
    spans: u64,
    backends: &[&Receiver],
    collectors: &[&Collector],
) -> Row {
    let telemetry = gpuspan::Telemetry::builder()
        .nvml_lib(fake.path())
        .metrics_exporter(gpuspan::settings::Exporter::None)
        .service_name("gpuspan-bench")
        .run_id("bench")
        .summary(false)
        .flush_on_signal(false)
        .endpoint(endpoint)
        .protocol(gpuspan::Protocol::Grpc)
        .export_queue(usize::try_from(spans).unwrap() + 1024)
        .build()
        .expect("telemetry");
    let subscriber = tracing_subscriber::registry().with(telemetry.layer());
    let cpu = |c: &&Collector| common::pid_cpu(c.pid());
    let before: Vec<Duration> = collectors.iter().map(cpu).collect();
    let started = Instant::now();
    tracing::subscriber::with_default(subscriber, || {
        for step in 0..spans {
            let _s = gpuspan::step_span!(step);
        }
    });
    telemetry.flush().expect("flush");
    // Until every backend holds every span; a minute without progress is a loss.
    let (mut last, mut progress) = (0, Instant::now());
    loop {
        let counts: Vec<u64> = backends.iter().map(|b| b.span_count()).collect();
        if counts.iter().all(|&c| c >= spans) {
            break;
        }
        let total = counts.iter().sum();
        if total > last {
            (last, progress) = (total, Instant::now());
        }
        assert!(
            progress.elapsed() < Duration::from_secs(60),
            "the spans stopped arriving at {counts:?} of {spans}; the collectors said:\n{}",
            collectors
                .iter()
                .map(|c| c.log_tail())
                .collect::<Vec<_>>()
                .join("\n---\n")
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let seconds = started.elapsed().as_secs_f64();
    let after: Vec<Duration> = collectors.iter().map(cpu).collect();
    telemetry.shutdown().expect("shutdown");
    for backend in backends {
        assert_eq!(backend.span_count(), spans, "a span arrived twice");
    }
    let used = |i: usize| after.get(i).map_or(Duration::ZERO, |a| *a - before[i]);
    Row {
        seconds,
        agent_cpu: used(0),
        gateway_cpu: used(1),
    }
}

fn main() {
    let spans = spans_per_row();
    let fake = FakeNvml::build();
    let dir = tempfile::tempdir().expect("a temporary directory");

    let direct = Receiver::start_grpc();
    let baseline = run(&fake, &direct.endpoint(), spans, &[&direct], &[]);

    let (jaeger, tempo) = (Receiver::start_grpc(), Receiver::start_grpc());
    let gateway = Collector::start_gateway(
        dir.path(),
        &format!("127.0.0.1:{}", jaeger.port()),
        &format!("127.0.0.1:{}", tempo.port()),
    );
    let agent = Collector::start_agent(dir.path(), &gateway, "bench-node");
    let through = run(
        &fake,
        &agent.otlp_endpoint("grpc"),
        spans,
        &[&jaeger, &tempo],
        &[&agent, &gateway],
    );

    println!(
        "agent → gateway: {spans} step spans per row, OTLP/gRPC, {}",
        common::machine()
    );
    println!("load: {}", common::load());
    println!("| path | seconds | delivered/s | ratio | agent CPU ms / 1,000 spans | gateway CPU ms / 1,000 spans |");
    println!("|---|---|---|---|---|---|");
    let per_thousand = |cpu: Duration| cpu.as_secs_f64() * 1e3 / (spans as f64 / 1e3);
    for (name, row) in [
        ("straight to a receiver", &baseline),
        ("agent → gateway → 2 receivers", &through),
    ] {
        println!(
            "| {name} | {:.2} | {:.0} | {:.2} | {} | {} |",
            row.seconds,
            spans as f64 / row.seconds,
            baseline.seconds / row.seconds,
            if row.agent_cpu.is_zero() {
                "-".into()
            } else {
                format!("{:.2}", per_thousand(row.agent_cpu))
            },
            if row.gateway_cpu.is_zero() {
                "-".into()
            } else {
                format!("{:.2}", per_thousand(row.gateway_cpu))
            },
        );
    }
}

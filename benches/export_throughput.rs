//! What the span export sustains into a run directory (`dir`) and, over gRPC and
//! HTTP/protobuf, into the in-process receiver (tests/support/receiver.rs), and what
//! happens past that.
//!
//! Spans: `step_span!` spans (1 fake NVML device, so every span carries the full set of
//! memory attributes) are produced at an offered rate, paced in 1 ms slots, for a window;
//! then `flush()` exports what is queued and `shutdown()` reports the spans the bounded queue
//! gave up; `received + dropped == produced` is asserted. Delivered per second = spans the receiver decoded / (production window +
//! flush). The sustained rate is the highest offered rate with nothing dropped; past it the
//! queue fills and every further span is dropped and counted. The export threads' CPU
//! (`gpuspan-spans` and the `gpuspan-export` runtime) per delivered span is shown too.
//!
//! Metric points: each configuration runs in a child process (the extra series need the
//! global meter provider, which only `install()` sets): gpuspan exports its own gauges for
//! 16 fake devices (5 instruments each, plus process memory) and, optionally, gauges with
//! 1,000 or 10,000 extra series registered on the global meter, with the export interval set
//! to 1 ms, so the periodic reader exports back to back. Points per second = points
//! decoded / window. Metrics are aggregated, not queued: past the exporter's rate nothing
//! is dropped, the export interval stretches (the effective interval column).
//!
//! `cargo bench --bench export_throughput` (GPUSPAN_BENCH_WINDOW_S=seconds per
//! configuration, default 2; GPUSPAN_BENCH_SPANS=`dir:200000,grpc:max` runs only those
//! span configurations and no metric one, for profiling).

#[path = "common/mod.rs"]
mod common;
use gpuspan_test_support::fake_nvml;
use gpuspan_test_support::receiver;

use std::time::{Duration, Instant};

use gpuspan::{ShutdownError, Telemetry};

use gpuspan::settings::Exporter;
use opentelemetry_proto::tonic::metrics::v1::metric::Data;
use tracing_subscriber::layer::SubscriberExt;

use fake_nvml::FakeNvml;
use receiver::Receiver;

fn window() -> Duration {
    common::window(Duration::from_secs(2), Duration::from_millis(200))
}

fn start_receiver(protocol: &str) -> Receiver {
    match protocol {
        "grpc" => Receiver::start_grpc(),
        _ => Receiver::start_http(),
    }
}

fn builder(protocol: &str, receiver: &Receiver) -> gpuspan::Builder {
    let protocol = match protocol {
        "grpc" => gpuspan::Protocol::Grpc,
        _ => gpuspan::Protocol::HttpProtobuf,
    };
    Telemetry::builder()
        .service_name("gpuspan-bench")
        .run_id("bench")
        .summary(false)
        .flush_on_signal(false)
        .endpoint(receiver.endpoint())
        .protocol(protocol)
}

fn received_points(receiver: &Receiver) -> u64 {
    let mut points = 0u64;
    for request in receiver.raw_metric_requests() {
        for metric in request
            .resource_metrics
            .iter()
            .flat_map(|r| &r.scope_metrics)
            .flat_map(|s| &s.metrics)
        {
            points += match &metric.data {
                Some(Data::Gauge(g)) => g.data_points.len(),
                Some(Data::Sum(s)) => s.data_points.len(),
                Some(Data::Histogram(h)) => h.data_points.len(),
                Some(Data::ExponentialHistogram(h)) => h.data_points.len(),
                Some(Data::Summary(s)) => s.data_points.len(),
                None => 0,
            } as u64;
        }
    }
    points
}

/// Spans written to a run directory's `traces.jsonl`.
fn spans_in_run_dir(dir: &std::path::Path) -> u64 {
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    let text = std::fs::read_to_string(dir.join("traces.jsonl")).unwrap_or_default();
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|line| {
            let request: ExportTraceServiceRequest =
                serde_json::from_str(line).expect("a valid OTLP/JSON line");
            request
                .resource_spans
                .iter()
                .flat_map(|r| &r.scope_spans)
                .map(|s| s.spans.len() as u64)
                .sum::<u64>()
        })
        .sum()
}

/// One span configuration: `rate` spans per second offered (`None`: as fast as the thread
/// goes) for `window`.
fn spans(protocol: &str, rate: Option<u64>, window: Duration) -> String {
    let receiver = start_receiver(protocol);
    let fake = FakeNvml::build();
    let run_root = tempfile::tempdir().expect("a temporary run directory");
    let traces = if protocol == "dir" {
        Exporter::RunDir
    } else {
        Exporter::Otlp
    };
    let telemetry = builder(protocol, &receiver)
        .nvml_lib(fake.path())
        .run_dir(run_root.path())
        .traces_exporter(traces)
        .metrics_exporter(Exporter::None)
        .build()
        .expect("gpuspan builds");
    let export_threads =
        || common::threads_cpu("gpuspan-spans") + common::threads_cpu("gpuspan-export");
    let cpu0 = export_threads();
    let subscriber = tracing_subscriber::registry().with(telemetry.layer());
    let start = Instant::now();
    let mut produced = 0u64;
    tracing::subscriber::with_default(subscriber, || {
        let slot = Duration::from_millis(1);
        let mut next = start;
        while start.elapsed() < window {
            let due = match rate {
                Some(rate) => {
                    let elapsed = next.saturating_duration_since(start) + slot;
                    (rate as f64 * elapsed.as_secs_f64()) as u64
                }
                None => produced + 256,
            };
            while produced < due {
                let _s = gpuspan::step_span!(produced);
                produced += 1;
            }
            if rate.is_some() {
                next += slot;
                let now = Instant::now();
                if next > now {
                    std::thread::sleep(next - now);
                }
            }
        }
    });
    let produce_time = start.elapsed();
    let flush_start = Instant::now();
    let flushed = telemetry.flush();
    let flush_time = flush_start.elapsed();
    let cpu = export_threads() - cpu0;
    let dropped = match telemetry.shutdown() {
        Ok(()) => 0,
        Err(ShutdownError::Dropped { spans, .. }) => spans,
        Err(e) => panic!("shutdown: {e}"),
    };
    if let Err(e) = flushed {
        eprintln!("flush: {e}");
    }
    let received = if protocol == "dir" {
        spans_in_run_dir(&run_root.path().join("bench"))
    } else {
        receiver.span_count()
    };
    assert_eq!(
        received + dropped,
        produced,
        "{protocol}: delivered + lost must be produced"
    );
    let total = produce_time + flush_time;
    format!(
        "{:<5} {:>9} {:>10.0} {:>9} {:>9} {:>8.1}% {:>11.0} {:>9.0} {:>12.2}",
        protocol,
        rate.map_or("max".to_owned(), |r| r.to_string()),
        produced as f64 / produce_time.as_secs_f64(),
        received,
        dropped,
        dropped as f64 * 100.0 / produced.max(1) as f64,
        received as f64 / total.as_secs_f64(),
        flush_time.as_secs_f64() * 1e3,
        cpu.as_secs_f64() * 1e6 / received.max(1) as f64,
    )
}

/// Child: metric points over `protocol` with `extra` extra series, for `window`.
fn metrics_child(protocol: &str, extra: usize, interval_ms: u64, window: Duration) {
    let receiver = start_receiver(protocol);
    let fake = FakeNvml::build();
    fake.set_device_count(16);
    let telemetry = builder(protocol, &receiver)
        .nvml_lib(fake.path())
        .traces_exporter(Exporter::None)
        .metrics_exporter(Exporter::Otlp)
        .metric_export_interval(Duration::from_millis(interval_ms))
        .install()
        .expect("gpuspan installs");
    // Gauges of at most 1000 series each (under the SDK's default cardinality limit).
    let meter = opentelemetry::global::meter("bench");
    let mut gauges = Vec::new();
    for g in 0..extra.div_ceil(1000) {
        let series = (extra - g * 1000).min(1000);
        gauges.push(
            meter
                .u64_observable_gauge(format!("bench.series.{g}"))
                .with_callback(move |observer| {
                    for k in 0..series {
                        observer.observe(
                            k as u64,
                            &[opentelemetry::KeyValue::new("series", k as i64)],
                        );
                    }
                })
                .build(),
        );
    }
    receiver.clear();
    let start = Instant::now();
    std::thread::sleep(window);
    let points_in_window = received_points(&receiver);
    let exports = receiver.metric_requests();
    let elapsed = start.elapsed();
    let dropped = match telemetry.shutdown() {
        Ok(()) => 0,
        Err(ShutdownError::Dropped { points, .. }) => points,
        Err(e) => panic!("shutdown: {e}"),
    };
    println!(
        "{:<5} {:>8} {:>11} {:>9} {:>9.1} {:>12.1} {:>12.0} {:>8}",
        protocol,
        extra,
        interval_ms,
        points_in_window / exports.max(1) as u64,
        exports as f64 / elapsed.as_secs_f64(),
        elapsed.as_secs_f64() * 1e3 / exports.max(1) as f64,
        points_in_window as f64 / elapsed.as_secs_f64(),
        dropped
    );
}

fn main() {
    let window = window();
    if let Some(config) = common::child_config() {
        let parts: Vec<&str> = config.split(':').collect();
        if let ["metrics", protocol, extra, interval] = parts[..] {
            metrics_child(
                protocol,
                extra.parse().expect("extra series"),
                interval.parse().expect("interval"),
                window,
            );
            return;
        }
        panic!("unknown child configuration {config}");
    }
    let full = common::full_run();
    println!(
        "export throughput: {} s per configuration",
        window.as_secs_f64()
    );
    println!("before: {}", common::machine());
    println!();
    println!("spans (step_span!, 1 fake device) into the in-process receiver");
    println!(
        "{:<5} {:>9} {:>10} {:>9} {:>9} {:>9} {:>11} {:>9} {:>12}",
        "proto",
        "offered/s",
        "produced/s",
        "received",
        "dropped",
        "dropped",
        "delivered/s",
        "flush ms",
        "export µs/span"
    );
    let rates: &[Option<u64>] = if full {
        &[
            Some(20_000),
            Some(50_000),
            Some(100_000),
            Some(200_000),
            None,
        ]
    } else {
        &[Some(10_000), None]
    };
    if let Ok(only) = std::env::var("GPUSPAN_BENCH_SPANS") {
        for config in only.split(',') {
            let (protocol, rate) = config.split_once(':').unwrap_or((config, "max"));
            let rate = (rate != "max").then(|| rate.parse().expect("a rate in spans/s or max"));
            println!("{}", spans(protocol, rate, window));
        }
        return;
    }
    for protocol in ["dir", "grpc", "http"] {
        for &rate in rates {
            println!("{}", spans(protocol, rate, window));
        }
    }
    println!();
    println!("metric points (16 fake devices + extra series) into the in-process receiver");
    println!(
        "{:<5} {:>8} {:>11} {:>9} {:>9} {:>12} {:>12} {:>8}",
        "proto",
        "extra",
        "interval ms",
        "pts/export",
        "exports/s",
        "eff. int. ms",
        "points/s",
        "dropped"
    );
    let extras: &[usize] = if full {
        &[0, 1_000, 10_000]
    } else {
        &[0, 1_000]
    };
    for protocol in ["grpc", "http"] {
        for &extra in extras {
            let status = common::child(&format!("metrics:{protocol}:{extra}:1"))
                .status()
                .expect("run the metrics child");
            assert!(status.success(), "metrics child {protocol} {extra} failed");
        }
    }
    println!();
    println!("after: load average {}", common::load());
}

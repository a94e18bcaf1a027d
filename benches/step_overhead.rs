//! Per-step overhead on the training thread: entering and leaving
//!
//! - (a) nothing (the loop alone),
//! - (b) a plain `tracing::info_span!("step", ml.step = i)` under a registry with the
//!   tracing-opentelemetry layer and an SDK tracer provider whose span processor exports
//!   OTLP/gRPC to an in-process receiver,
//! - (c) `gpuspan::step_span!(i)`, under the very same subscriber, with the sampler reading
//!   the fake NVML library (1 and 8 devices) and host memory every 5 ms (the default).
//!
//! (b) and (c) share one subscriber per device count: gpuspan's own layer
//! (`Telemetry::layer()`, which is tracing-opentelemetry's layer plus gpuspan's marker
//! layer) built with `.traces_exporter(Exporter::Otlp)` and `.metrics_exporter(Exporter::Otlp)`
//! (at the default 60 s interval, so `step_span!` pays for its `ml.step.duration` histogram
//! as it does by default). Both go through the same span processor, exporter, receiver and
//! sampler thread; only the span differs. `i` is a `u64`, which tracing-opentelemetry
//! records on (b) as a string (OTel integers are `i64`); `step_span!` converts it to `i64`.
//!
//! Spans are timed in chunks of at most 4096, and the exporter is flushed between chunks,
//! outside the timed region, so the bounded queue (8192) never overflows (a dropped span
//! would cost less than an exported one and flatter the figure). What is timed is the
//! training thread's latency; the export thread's own CPU is measured by
//! `export_throughput`.
//!
//! After the criterion groups, an interleaved pass (rounds of a, b, c, d in turn, medians of
//! per-round ratios) prints the ratios that BENCHMARKS.md reports, since the machine is
//! noisy and criterion measures one benchmark after the other.
//!
//! `cargo bench --bench step_overhead`

#[path = "common/mod.rs"]
mod common;
use gpuspan_test_support::fake_nvml;
use gpuspan_test_support::receiver;

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion};
use gpuspan::settings::Exporter;
use gpuspan::{Protocol, ShutdownError, Telemetry};
use tracing_subscriber::layer::SubscriberExt;

use fake_nvml::FakeNvml;
use receiver::Receiver;

/// Spans timed between two flushes: half the queue's capacity.
const CHUNK: u64 = 4096;

/// A running gpuspan exporting spans to an in-process OTLP/gRPC receiver, with the sampler
/// on a fake NVML library of `devices` devices, or a disabled one (`devices == None`).
struct Setup {
    telemetry: Telemetry,
    receiver: Option<Receiver>,
    _fake: Option<FakeNvml>,
    name: String,
}

impl Setup {
    fn new(devices: Option<u32>) -> Setup {
        let Some(devices) = devices else {
            let telemetry = Telemetry::builder()
                .disabled(true)
                .build()
                .expect("gpuspan builds disabled");
            return Setup {
                telemetry,
                receiver: None,
                _fake: None,
                name: "disabled".into(),
            };
        };
        let fake = FakeNvml::build();
        fake.set_device_count(devices);
        let receiver = Receiver::start_grpc();
        let telemetry = Telemetry::builder()
            .service_name("gpuspan-bench")
            .run_id("bench")
            .summary(false)
            .flush_on_signal(false)
            .nvml_lib(fake.path())
            .endpoint(receiver.endpoint())
            .protocol(Protocol::Grpc)
            .traces_exporter(Exporter::Otlp)
            .metrics_exporter(Exporter::Otlp)
            .build()
            .expect("gpuspan builds");
        assert_eq!(
            telemetry.memory_source(),
            Some("nvml"),
            "the fake NVML is read"
        );
        assert_eq!(telemetry.devices().len(), devices as usize);
        Setup {
            telemetry,
            receiver: Some(receiver),
            _fake: Some(fake),
            name: format!("{devices}dev"),
        }
    }

    /// This setup's subscriber, as the thread's default until the guard drops.
    fn enter(&self) -> tracing::subscriber::DefaultGuard {
        let subscriber = tracing_subscriber::registry().with(self.telemetry.layer());
        tracing::subscriber::set_default(subscriber)
    }

    /// Exports what is queued and forgets what the receiver got.
    fn drain(&self) {
        if let Some(receiver) = &self.receiver {
            self.telemetry.flush().expect("flush");
            receiver.clear();
        }
    }

    /// Shuts down and fails loudly if a span was dropped (the figures would be wrong).
    fn finish(self) {
        match self.telemetry.shutdown() {
            Ok(()) => {}
            Err(ShutdownError::Dropped { spans, .. }) if spans > 0 => {
                panic!(
                    "{}: {spans} span(s) dropped: the figures are not valid",
                    self.name
                )
            }
            Err(e) => eprintln!("{}: shutdown: {e}", self.name),
        }
    }
}

/// What one step does.
#[derive(Clone, Copy, Debug)]
enum Case {
    /// (a) the loop alone.
    Nothing,
    /// (b) a plain tracing span with one field.
    Plain,
    /// (c) gpuspan's step span.
    Step,
}

impl Case {
    fn name(self) -> &'static str {
        match self {
            Case::Nothing => "a_nothing",
            Case::Plain => "b_info_span",
            Case::Step => "c_step_span",
        }
    }
}

#[inline(never)]
fn one_step(case: Case, i: u64) {
    match case {
        Case::Nothing => {
            black_box(i);
        }
        Case::Plain => {
            let _s = tracing::info_span!("step", ml.step = black_box(i)).entered();
        }
        Case::Step => {
            let _s = gpuspan::step_span!(black_box(i));
        }
    }
}

/// Runs `iters` steps of `case`, timing only the steps, draining the exporter every
/// [`CHUNK`] steps.
fn timed(setup: &Setup, case: Case, iters: u64) -> Duration {
    let mut total = Duration::ZERO;
    let mut done = 0;
    while done < iters {
        let n = CHUNK.min(iters - done);
        let start = Instant::now();
        for i in done..done + n {
            one_step(case, i);
        }
        total += start.elapsed();
        done += n;
        if !matches!(case, Case::Nothing) {
            setup.drain();
        }
    }
    total
}

fn criterion_group(c: &mut Criterion, setup: &Setup) {
    let mut group = c.benchmark_group("step");
    let _guard = setup.enter();
    let cases: &[Case] = if setup.name == "disabled" {
        &[Case::Step]
    } else {
        &[Case::Nothing, Case::Plain, Case::Step]
    };
    for &case in cases {
        group.bench_with_input(
            BenchmarkId::new(case.name(), &setup.name),
            &case,
            |b, &case| b.iter_custom(|iters| timed(setup, case, iters)),
        );
    }
    group.finish();
}

/// Rounds of every case in turn, so the ratios see the same machine state; returns the
/// table row.
fn interleaved(setup: &Setup, rounds: usize, per_round: u64) -> String {
    let _guard = setup.enter();
    let ns = |case: Case, n: u64| timed(setup, case, n).as_nanos() as f64 / n as f64;
    if setup.name == "disabled" {
        let steps = per_round * 4;
        ns(Case::Step, steps);
        let mut c: Vec<f64> = (0..rounds).map(|_| ns(Case::Step, steps)).collect();
        c.push(ns(Case::Step, steps));
        return format!(
            "{:<10} {:>12} {:>14} {:>14.1} {:>10} {:>12}",
            "disabled",
            "",
            "",
            common::median(&c),
            "",
            ""
        );
    }
    // Warm the three paths up once.
    for case in [Case::Nothing, Case::Plain, Case::Step] {
        ns(case, per_round);
    }
    let (mut a, mut b, mut c, mut ratio) = (vec![], vec![], vec![], vec![]);
    for round in 0..rounds {
        // Alternate the order, so neither case always runs first after a flush.
        let (x, y) = if round % 2 == 0 {
            let x = ns(Case::Plain, per_round);
            (x, ns(Case::Step, per_round))
        } else {
            let y = ns(Case::Step, per_round);
            (ns(Case::Plain, per_round), y)
        };
        a.push(ns(Case::Nothing, per_round));
        b.push(x);
        c.push(y);
        ratio.push(y / x);
    }
    let (a, b, c) = (common::median(&a), common::median(&b), common::median(&c));
    format!(
        "{:<10} {:>12.1} {:>14.0} {:>14.0} {:>9.2}x {:>12.0}",
        setup.name,
        a,
        b,
        c,
        common::median(&ratio),
        c - b
    )
}

fn main() {
    let full = common::full_run();
    let (rounds, per_round) = if full { (15, 20_000) } else { (2, 2_000) };
    let mut criterion = Criterion::default()
        .sample_size(20)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .configure_from_args();
    let load_before = common::machine();
    let mut rows = Vec::new();
    for devices in [Some(1), Some(8), None] {
        let setup = Setup::new(devices);
        if full {
            criterion_group(&mut criterion, &setup);
        }
        rows.push(interleaved(&setup, rounds, per_round));
        setup.finish();
    }
    if full {
        criterion.final_summary();
    }
    println!();
    println!("step overhead, interleaved: {rounds} rounds of {per_round} steps per case, medians");
    println!("before: {load_before}");
    println!("after:  load average {}", common::load());
    println!(
        "{:<10} {:>12} {:>14} {:>14} {:>10} {:>12}",
        "setup", "a nothing ns", "b info_span ns", "c step_span ns", "c/b", "c-b ns"
    );
    for row in rows {
        println!("{row}");
    }
}

//! Resident memory that gpuspan adds: after `build()` (what `init()` does, less the global
//! install and the `fmt` layer), after a 10,000-step run, after `flush()` and after
//! `shutdown()`, as differences from the resident set size (`/proc/self/statm`) of the same
//! process just before `build()`, plus the peak (`VmHWM`) over that baseline.
//!
//! Each configuration runs in a fresh child process, since freed memory is not always given
//! back to the system and one configuration would otherwise inherit another's pages. The
//! fake NVML library is loaded (and, for OTLP, the receiver started in a separate process)
//! before the baseline is taken, so what is counted is gpuspan's own. Each step sleeps
//! 100 µs, a short but not absurd step, so the exporter keeps up as it would in training.
//!
//! `cargo bench --bench memory`

#[path = "common/mod.rs"]
mod common;
use gpuspan_test_support::fake_nvml;
use gpuspan_test_support::receiver;

use std::io::{BufRead, BufReader, Read, Write};
use std::process::Stdio;
use std::time::{Duration, Instant};

use gpuspan::{ShutdownError, Telemetry};

use gpuspan::settings::Exporter;
use tracing_subscriber::layer::SubscriberExt;

use common::{mib, mib_delta};
use fake_nvml::FakeNvml;

const STEPS: u64 = 10_000;

/// Child: serves an OTLP/gRPC receiver, prints its endpoint, exits when stdin closes.
fn serve() {
    let receiver = receiver::Receiver::start_grpc();
    println!("{}", receiver.endpoint());
    std::io::stdout().flush().expect("stdout");
    let mut sink = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut sink);
    drop(receiver);
}

/// Child: one configuration.
fn measure(config: &str, devices: u32, steps: u64) {
    let fake = FakeNvml::build();
    fake.set_device_count(devices);
    let run_dir = tempfile::tempdir().expect("temporary run directory");
    let mut server = None;
    let mut builder = Telemetry::builder()
        .service_name("gpuspan-bench")
        .run_id("bench")
        .summary(false)
        .flush_on_signal(false)
        .nvml_lib(fake.path());
    builder = match config {
        "none" => builder
            .traces_exporter(Exporter::None)
            .metrics_exporter(Exporter::None),
        "rundir" => builder.run_dir(run_dir.path()),
        "otlp-grpc" => {
            let mut child = common::child("serve")
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .expect("start the receiver process");
            let mut line = String::new();
            BufReader::new(child.stdout.take().expect("receiver stdout"))
                .read_line(&mut line)
                .expect("receiver endpoint");
            server = Some(child);
            builder
                .endpoint(line.trim())
                .protocol(gpuspan::Protocol::Grpc)
        }
        other => panic!("unknown configuration {other}"),
    };
    // Let the loader and allocator settle before the baseline.
    std::thread::sleep(Duration::from_millis(100));
    let before = common::rss_bytes();

    let telemetry = builder.build().expect("gpuspan builds");
    let subscriber = tracing_subscriber::registry().with(telemetry.layer());
    let guard = tracing::subscriber::set_default(subscriber);
    let built = common::rss_bytes();

    let start = Instant::now();
    for i in 0..steps {
        let _s = gpuspan::step_span!(i);
        std::thread::sleep(Duration::from_micros(100));
    }
    let run_time = start.elapsed();
    let stepped = common::rss_bytes();
    telemetry.flush().expect("flush");
    let flushed = common::rss_bytes();
    drop(guard);
    let dropped = match telemetry.shutdown() {
        Ok(()) => 0,
        Err(ShutdownError::Dropped { spans, .. }) => spans,
        Err(e) => panic!("shutdown: {e}"),
    };
    let shut = common::rss_bytes();
    let peak = common::hwm_bytes();
    if let Some(mut server) = server {
        drop(server.stdin.take());
        let _ = server.wait();
    }
    println!(
        "{:<10} {:>7} {:>10.1} {:>9.2} {:>11.2} {:>11.2} {:>11.2} {:>9.2} {:>8} {:>7.2}",
        config,
        devices,
        mib(before),
        mib_delta(built, before),
        mib_delta(stepped, before),
        mib_delta(flushed, before),
        mib_delta(shut, before),
        mib_delta(peak, before),
        dropped,
        run_time.as_secs_f64(),
    );
}

fn main() {
    let steps = if common::full_run() { STEPS } else { 500 };
    if let Some(config) = common::child_config() {
        if config == "serve" {
            serve();
            return;
        }
        let (name, devices) = config.split_once(':').expect("config:devices");
        measure(name, devices.parse().expect("device count"), steps);
        return;
    }
    println!("memory: resident set added by gpuspan, MiB over the process before build(); {steps} steps of 100 µs");
    println!("before: {}", common::machine());
    println!(
        "{:<10} {:>7} {:>10} {:>9} {:>11} {:>11} {:>11} {:>9} {:>8} {:>7}",
        "config",
        "devices",
        "base MiB",
        "+build",
        "+steps",
        "+flush",
        "+shutdown",
        "+peak",
        "dropped",
        "run s"
    );
    for config in [
        "none:1",
        "rundir:1",
        "rundir:8",
        "otlp-grpc:1",
        "otlp-grpc:8",
    ] {
        let status = common::child(config).status().expect("run the child");
        assert!(status.success(), "{config} failed");
    }
    println!("after: load average {}", common::load());
}

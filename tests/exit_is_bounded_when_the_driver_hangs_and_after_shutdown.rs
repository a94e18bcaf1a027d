// A test binary of its own: it measures the resident memory of the process.
//! Leaving is bounded and cheap: a driver call that hangs (a GPU fallen off the bus) cannot
//! hang shutdown, and spans opened after shutdown cost nothing and keep nothing.

use gpuspan_test_support as support;

use std::time::{Duration, Instant};

use support::fake_nvml::FakeNvml;
use support::receiver::Receiver;

#[test]
fn shutdown_returns_while_an_nvml_call_hangs() {
    let nvml = FakeNvml::build();
    nvml.set_device_count(1);
    nvml.set_memory(0, 1 << 30, 80 << 30);
    let receiver = Receiver::start_grpc();
    let builder = support::setup::to_receiver(&receiver)
        .nvml_lib(nvml.path())
        .timeout(Duration::from_secs(2));
    let (telemetry, ()) = support::setup::run(builder, |_| {
        let _s = gpuspan::step_span!(0);
    });
    // The next memory read blocks for a minute.
    nvml.set_hang(Duration::from_secs(60));
    std::thread::sleep(Duration::from_millis(50));
    let started = Instant::now();
    telemetry.shutdown().expect("the step was delivered");
    let took = started.elapsed();
    nvml.set_hang(Duration::ZERO);
    assert!(
        took < Duration::from_secs(5),
        "shutdown took {took:?} while the driver hung"
    );
    assert_eq!(receiver.spans_named("step").len(), 1);
}

fn resident_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

#[test]
fn spans_after_shutdown_track_nothing() {
    let receiver = Receiver::start_http();
    let builder = support::setup::to_receiver(&receiver);
    let telemetry = builder.build().expect("gpuspan builds");
    let subscriber = tracing_subscriber::layer::SubscriberExt::with(
        tracing_subscriber::registry(),
        telemetry.layer(),
    );
    tracing::subscriber::with_default(subscriber, || {
        {
            let _s = gpuspan::step_span!(0);
        }
        telemetry.shutdown().expect("delivered");
        // Warm up allocator pools before measuring.
        for step in 0..1_000u64 {
            let s = gpuspan::step_span!(step);
            assert!(s.memory().is_none(), "a span after shutdown is tracked");
        }
        let before = resident_bytes();
        for step in 0..300_000u64 {
            let _s = gpuspan::step_span!(step);
        }
        let grown = resident_bytes().saturating_sub(before);
        assert!(
            grown < 8 << 20,
            "300,000 spans after shutdown grew memory by {grown} bytes"
        );
    });
    assert_eq!(receiver.spans_named("step").len(), 1);
}

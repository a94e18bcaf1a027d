//! A program that catches SIGTERM itself and returns from `main` shuts gpuspan down while the
//! flush that the signal started is still running (the collector is slow to answer). The
//! shutdown waits for that flush and then does its own work: every span completed before
//! the exit arrives, nothing is reported lost, and the exit does not wait out the export
//! timeout.

use gpuspan_test_support as support;

use std::time::{Duration, Instant};

use support::receiver::{Protocol, Receiver};
use support::signalled::{killed_by, Program};

/// Steps per epoch in the example.
const STEPS: i64 = 5;

fn returns_from_main_during_the_flush(protocol: Protocol) {
    let receiver = Receiver::start(protocol);
    let mut program = Program::start_exporting_to(
        &receiver,
        "sigaction-before",
        &["--return-from-main"],
        // Far longer than the test allows: a shutdown that waited out a bound fails.
        &[("OTEL_EXPORTER_OTLP_TIMEOUT", "30000")],
    );
    program.wait_for_line("epoch 1 done", Duration::from_secs(30));
    // Every request now takes 700 ms to be answered: the signal's flush is still running
    // when the program returns from `main` right after saving its checkpoint.
    receiver.set_stall(Duration::from_millis(700));
    let signalled = Instant::now();
    program.signal(libc::SIGTERM);
    let status = program.wait(Duration::from_secs(25));
    let took = signalled.elapsed();
    let stderr = program.stderr.lock().unwrap().clone();

    assert_eq!(killed_by(status), None, "{status:?}; stderr:\n{stderr}");
    assert_eq!(status.code(), Some(3), "stderr:\n{stderr}");
    // Without NVML here, gpuspan warns once that spans carry host memory only, and on a
    // busy machine it may say the sampler fell behind its cadence; any other line is the
    // shutdown reporting a timeout or a loss.
    let problems: Vec<&str> = stderr
        .lines()
        .filter(|l| {
            l.starts_with("gpuspan:")
                && !l.contains("no GPU memory source")
                && !l.contains("the sampler read device memory every")
        })
        .collect();
    assert!(
        problems.is_empty(),
        "the shutdown reported a problem: {problems:#?}"
    );
    assert!(
        took < Duration::from_secs(10),
        "the exit took {took:?}: it waited for a bound, not for the flush"
    );

    // The checkpoint names the step that was open; it and its epoch ended on the way out.
    let checkpoint = program
        .checkpoint()
        .expect("the handler saved a checkpoint");
    let mut words = checkpoint.split_whitespace();
    let epoch: i64 = words.nth(1).and_then(|w| w.parse().ok()).expect("epoch");
    let step: i64 = words.nth(1).and_then(|w| w.parse().ok()).expect("step");
    let steps = receiver.spans_named("step").len() as i64;
    let epochs = receiver.spans_named("epoch").len() as i64;
    assert_eq!(
        steps,
        epoch * STEPS + step + 1,
        "{protocol:?}: every step completed before the exit arrives ({checkpoint:?})"
    );
    assert_eq!(epochs, epoch + 1, "{protocol:?}: every epoch arrives");
}

#[test]
fn over_grpc() {
    returns_from_main_during_the_flush(Protocol::Grpc);
}

#[test]
fn over_http() {
    returns_from_main_during_the_flush(Protocol::Http);
}

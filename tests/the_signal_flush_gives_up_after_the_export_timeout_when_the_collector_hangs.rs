//! With a collector that accepts connections and never answers, the flush on SIGTERM lasts
//! no longer than the export timeout (`OTEL_EXPORTER_OTLP_TIMEOUT`), with or without a
//! handler of the program's, and a second SIGTERM ends a waiting program at once.

mod support;

use std::time::{Duration, Instant};

use support::signalled::{killed_by, Program, SilentCollector};

/// Time for the process to notice the signal, report and end, on a busy machine.
const SLACK: Duration = Duration::from_secs(3);

fn start(handler: &str, collector: &SilentCollector, timeout_ms: &str) -> Program {
    let endpoint = collector.endpoint();
    let program = Program::start(
        handler,
        &[],
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", timeout_ms),
        ],
    );
    program.wait_for_line("epoch 1 done", Duration::from_secs(30));
    program
}

#[test]
fn without_a_handler_sigterm_ends_the_process_within_the_timeout() {
    let collector = SilentCollector::start();
    let mut program = start("none", &collector, "1000");
    let signalled = Instant::now();
    program.signal(libc::SIGTERM);
    let status = program.wait(Duration::from_secs(60));
    let took = signalled.elapsed();
    assert_eq!(killed_by(status), Some(libc::SIGTERM), "{status:?}");
    assert!(took < Duration::from_secs(1) + SLACK, "took {took:?}");
    let stderr = program.stderr.lock().unwrap().clone();
    assert!(
        stderr.contains("did not finish within 1s"),
        "the lost flush is reported; stderr:\n{stderr}"
    );
}

#[test]
fn with_a_handler_the_exit_waits_no_longer_than_the_timeout() {
    let collector = SilentCollector::start();
    let mut program = start("signal-hook-after", &collector, "1000");
    let signalled = Instant::now();
    program.signal(libc::SIGTERM);
    let status = program.wait(Duration::from_secs(60));
    let took = signalled.elapsed();
    assert_eq!(status.code(), Some(3), "{status:?}");
    assert!(program.checkpoint().is_some());
    assert!(took < Duration::from_secs(1) + SLACK, "took {took:?}");
}

#[test]
fn a_second_sigterm_during_the_flush_ends_the_process_at_once() {
    let collector = SilentCollector::start();
    let mut program = start("none", &collector, "60000");
    program.signal(libc::SIGTERM);
    std::thread::sleep(Duration::from_millis(300));
    let again = Instant::now();
    program.signal(libc::SIGTERM);
    let status = program.wait(Duration::from_secs(60));
    let took = again.elapsed();
    assert_eq!(killed_by(status), Some(libc::SIGTERM), "{status:?}");
    assert!(took < SLACK, "took {took:?} after the second signal");
}

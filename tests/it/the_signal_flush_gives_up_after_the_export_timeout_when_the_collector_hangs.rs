//! With a collector that accepts connections and never answers, the flush on SIGTERM lasts
//! as long as the export timeout (`OTEL_EXPORTER_OTLP_TIMEOUT`) and no longer, with or
//! without a handler of the program's. A second SIGTERM (launchers send two as a matter of
//! course) leaves the flush its bound; a second Ctrl-C ends a waiting program at once.

use gpuspan_test_support as support;

use std::time::{Duration, Instant};

use support::signalled::{killed_by, Program, SilentCollector};

/// The export timeout the program runs with (`OTEL_EXPORTER_OTLP_TIMEOUT`). Flushing traces
/// and then metrics, each for up to this long, would take twice as long.
const TIMEOUT: Duration = Duration::from_secs(4);

/// Time for the process to notice the signal, report and end, on a busy machine.
const SLACK: Duration = Duration::from_millis(2500);

fn start(handler: &str, collector: &SilentCollector, timeout: Duration) -> Program {
    let endpoint = collector.endpoint();
    let timeout_ms = timeout.as_millis().to_string();
    let program = Program::start(
        handler,
        &[],
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", &timeout_ms),
        ],
    );
    program.wait_for_line("epoch 1 done", Duration::from_secs(30));
    program
}

#[test]
fn without_a_handler_sigterm_ends_the_process_within_the_timeout() {
    let collector = SilentCollector::start();
    let mut program = start("none", &collector, TIMEOUT);
    let signalled = Instant::now();
    program.signal(libc::SIGTERM);
    let status = program.wait(Duration::from_secs(60));
    let took = signalled.elapsed();
    assert_eq!(killed_by(status), Some(libc::SIGTERM), "{status:?}");
    assert!(took < TIMEOUT + SLACK, "took {took:?}");
}

/// The program saves its checkpoint and exits at once; the exit waits for the flush the
/// signal started, which cannot finish here (the metrics export hangs until its timeout),
/// so it ends at the timeout.
#[test]
fn with_a_handler_the_exit_waits_for_the_flush_up_to_the_timeout() {
    let collector = SilentCollector::start();
    let mut program = start("signal-hook-after", &collector, TIMEOUT);
    let signalled = Instant::now();
    program.signal(libc::SIGTERM);
    let status = program.wait(Duration::from_secs(60));
    let took = signalled.elapsed();
    assert_eq!(status.code(), Some(3), "{status:?}");
    assert!(program.checkpoint().is_some());
    assert!(
        took >= TIMEOUT.mul_f64(0.9) && took < TIMEOUT + SLACK,
        "took {took:?}"
    );
}

#[test]
fn a_second_sigterm_during_the_flush_leaves_it_its_bound() {
    let collector = SilentCollector::start();
    let mut program = start("none", &collector, TIMEOUT);
    let signalled = Instant::now();
    program.signal_delivered(libc::SIGTERM);
    std::thread::sleep(Duration::from_millis(300));
    program.signal(libc::SIGTERM);
    let status = program.wait(Duration::from_secs(60));
    let took = signalled.elapsed();
    assert_eq!(killed_by(status), Some(libc::SIGTERM), "{status:?}");
    assert!(
        took >= TIMEOUT.mul_f64(0.9) && took < TIMEOUT + SLACK,
        "took {took:?}"
    );
}

#[test]
fn a_second_sigint_during_the_flush_ends_the_process_at_once() {
    let collector = SilentCollector::start();
    let mut program = start("none", &collector, Duration::from_secs(60));
    program.signal_delivered(libc::SIGINT);
    std::thread::sleep(Duration::from_millis(300));
    let again = Instant::now();
    program.signal(libc::SIGINT);
    let status = program.wait(Duration::from_secs(60));
    let took = again.elapsed();
    assert_eq!(killed_by(status), Some(libc::SIGINT), "{status:?}");
    assert!(took < SLACK, "took {took:?} after the second signal");
}

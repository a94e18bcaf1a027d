//! A program that catches SIGTERM to save a checkpoint (SLURM preemption, Kubernetes
//! eviction) keeps doing so with gpuspan installed, whether its handler was installed before
//! `gpuspan::init()` or after it; and the spans completed before the signal reach the
//! collector, with the metrics, although the program exits at once without shutting
//! gpuspan down.

use gpuspan_test_support as support;

use std::time::Duration;

use support::receiver::{Protocol, Receiver};
use support::signalled::{assert_the_first_two_epochs_arrived, killed_by, Program};

/// The example's exit status after it saved its checkpoint.
const CHECKPOINTED: i32 = 3;

fn handler_decides(handler: &str, protocol: Protocol) {
    let receiver = Receiver::start(protocol);
    let mut program = Program::start_exporting_to(&receiver, handler, &[], &[]);
    // Spans are exported in batches every second and metrics every minute; two epochs take
    // a tenth of that, so without a flush on the signal they would still be queued.
    program.wait_for_line("epoch 1 done", Duration::from_secs(30));
    program.signal(libc::SIGTERM);
    let status = program.wait(Duration::from_secs(20));

    assert_eq!(
        killed_by(status),
        None,
        "SIGTERM killed the program: {status:?}"
    );
    assert_eq!(
        status.code(),
        Some(CHECKPOINTED),
        "the program's handler decides how it exits; stderr:\n{}",
        program.stderr.lock().unwrap()
    );
    let checkpoint = program
        .checkpoint()
        .expect("the handler saved a checkpoint");
    assert!(checkpoint.starts_with("epoch "), "{checkpoint:?}");

    // Read at once: the exit waited for the flush the signal started.
    assert_the_first_two_epochs_arrived(&receiver, &program.stderr.lock().unwrap());
    assert!(
        !receiver.points_named("process.memory.usage").is_empty(),
        "the metrics were not flushed on the signal"
    );
}

#[test]
fn sigaction_handler_installed_before_init() {
    handler_decides("sigaction-before", Protocol::Grpc);
}

#[test]
fn signal_hook_handler_installed_before_init() {
    handler_decides("signal-hook-before", Protocol::Http);
}

#[test]
fn signal_hook_handler_installed_after_init() {
    handler_decides("signal-hook-after", Protocol::Grpc);
}

#[test]
fn chaining_sigaction_handler_installed_after_init() {
    handler_decides("sigaction-after", Protocol::Http);
}

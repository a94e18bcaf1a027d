//! Some C libraries end the process from inside their SIGTERM handler (`exit` in the
//! handler). gpuspan asks for the flush before it calls that handler, so the exit waits for
//! the flush: the spans completed before the signal reach the collector, and the exit
//! status is the program's.

use gpuspan_test_support as support;

use std::time::Duration;

use support::receiver::Receiver;
use support::signalled::{assert_the_first_two_epochs_arrived, killed_by, Program};

#[test]
fn the_spans_completed_before_the_signal_arrive() {
    let receiver = Receiver::start_grpc();
    let mut program = Program::start_exporting_to(&receiver, "exit-in-handler", &[], &[]);
    // Spans go out in batches every half second and metrics every minute: two epochs take
    // a tenth of a second, so without the flush they would still be queued.
    program.wait_for_line("epoch 1 done", Duration::from_secs(30));
    // Right after that line the program opens the next epoch's span, inside malloc. A
    // handler that calls `exit` there deadlocks in glibc whoever else is in the process
    // (the exit hooks free memory under the allocator lock the interrupted call holds), so
    // the signal comes where a preemption's almost always does: during a step, while the
    // program sleeps in it.
    std::thread::sleep(Duration::from_millis(15));
    program.signal(libc::SIGTERM);
    let status = program.wait(Duration::from_secs(20));
    let stderr = program.stderr.lock().unwrap().clone();

    assert_eq!(killed_by(status), None, "{status:?}; stderr:\n{stderr}");
    assert_eq!(
        status.code(),
        Some(3),
        "the handler's exit status; stderr:\n{stderr}"
    );
    assert_the_first_two_epochs_arrived(&receiver, &stderr);
    assert!(
        !receiver.points_named("process.memory.usage").is_empty(),
        "the metrics were not flushed before the exit"
    );
}

//! A program with no SIGTERM handler of its own still ends on SIGTERM, killed by the signal
//! as without gpuspan, once the completed spans were exported. A worker process forked
//! from it (as data loaders fork theirs) is ended by SIGTERM too, and signalling the worker
//! leaves the parent running.

use gpuspan_test_support as support;

use std::time::Duration;

use support::receiver::Receiver;
use support::signalled::{assert_the_first_two_epochs_arrived, killed_by, send, Program};

#[test]
fn the_process_is_killed_by_sigterm_after_its_spans_reached_the_collector() {
    let receiver = Receiver::start_grpc();
    let mut program = Program::start_exporting_to(&receiver, "none", &[], &[]);
    program.wait_for_line("epoch 1 done", Duration::from_secs(30));
    program.signal(libc::SIGTERM);
    let status = program.wait(Duration::from_secs(20));
    assert_eq!(killed_by(status), Some(libc::SIGTERM), "{status:?}");
    assert_eq!(program.checkpoint(), None);
    let stderr = program.stderr.lock().unwrap().clone();
    assert_the_first_two_epochs_arrived(&receiver, &stderr);
}

#[test]
fn a_forked_worker_is_killed_by_sigterm_and_the_parent_goes_on() {
    let mut program = Program::start("none", &["--fork-worker"], &[]);
    let line = program.wait_for_line("worker ", Duration::from_secs(30));
    let worker: i32 = line["worker ".len()..].parse().unwrap();
    program.wait_for_line("epoch 0 done", Duration::from_secs(30));

    send(worker, libc::SIGTERM);
    let ended = program.wait_for_line("worker ", Duration::from_secs(10));
    assert_eq!(ended, format!("worker ended by signal {}", libc::SIGTERM));
    // The parent keeps training after its worker's signal.
    let next = program.wait_for_line("epoch ", Duration::from_secs(10));
    assert!(next.ends_with(" done"), "{next}");

    program.signal(libc::SIGTERM);
    let status = program.wait(Duration::from_secs(20));
    assert_eq!(killed_by(status), Some(libc::SIGTERM), "{status:?}");
    let traces = std::fs::read_to_string(program.run_dir().join("traces.jsonl")).unwrap();
    assert!(
        traces.contains("\"name\":\"epoch\""),
        "no epoch span flushed"
    );
}

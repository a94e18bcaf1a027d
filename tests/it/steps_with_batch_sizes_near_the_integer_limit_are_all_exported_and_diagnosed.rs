//! A step may carry any `batch_size`, however large: the batch-size fit cannot represent
//! sums of squares of sizes near `i64::MAX`, and must say it cannot fit rather than fail.
//! Every step still reaches the receiver, and the diagnosis goes on for the later spans.

use gpuspan_test_support as support;

use gpuspan::MemoryBudget;
use support::receiver::Receiver;
use support::scripted::scripted;
use support::setup;

const GIB: u64 = 1 << 30;
const STEPS: i64 = 6;

#[test]
fn huge_batch_sizes_lose_no_span_and_no_finding() {
    let receiver = Receiver::start_grpc();
    let (source, script) = scripted(1, 10 * GIB);
    let builder = setup::to_receiver(&receiver)
        .memory_source(source)
        .memory_budget(MemoryBudget::Bytes(GIB));
    let (telemetry, fit) = setup::run(builder, |telemetry| {
        let _epoch = gpuspan::epoch_span!(0);
        for step in 0..STEPS {
            let _step = gpuspan::step_span!(step, batch_size = i64::MAX - step);
            script.wait_reads(1);
        }
        drop(_epoch);
        // Every step has passed the diagnosis once the flush returns.
        telemetry.flush().expect("the flush succeeds");
        telemetry.batch_fit()
    });
    telemetry.shutdown().expect("every span delivered");

    assert_eq!(fit, None, "such sizes cannot be fitted");
    let steps = receiver.spans_named("step");
    assert_eq!(steps.len(), STEPS as usize);
    // The diagnosis kept running: every step is over the 1 GiB budget.
    for step in &steps {
        assert_eq!(
            step.events_named("gpu.memory.budget_exceeded").len(),
            1,
            "step {:?}",
            step.int_attr("ml.step")
        );
        assert!(step.int_attr("batch_size").unwrap() > i64::MAX - STEPS);
    }
    assert_eq!(receiver.spans_named("epoch").len(), 1);
}

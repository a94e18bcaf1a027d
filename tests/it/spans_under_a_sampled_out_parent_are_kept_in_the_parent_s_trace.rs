//! A program whose caller sampled its trace out (W3C flag 00, as CI systems and launchers
//! propagate) still gets every gpuspan span: the epoch and its steps are exported in the
//! caller's trace, under the caller's span, as they are under a sampled parent.

use gpuspan_test_support as support;

use opentelemetry::trace::{SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState};
use opentelemetry::Context;

use support::receiver::Receiver;
use support::setup::{run, to_receiver};

const TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const PARENT: &str = "00f067aa0ba902b7";

/// One epoch of five steps under a remote parent with `flags`; the spans received.
fn train_under(flags: TraceFlags) -> Vec<support::receiver::ReceivedSpan> {
    let receiver = Receiver::start_grpc();
    let parent = SpanContext::new(
        TraceId::from_hex(TRACE).unwrap(),
        SpanId::from_hex(PARENT).unwrap(),
        flags,
        true,
        TraceState::default(),
    );
    let (telemetry, ()) = run(to_receiver(&receiver), |_| {
        let _parent = Context::new().with_remote_span_context(parent).attach();
        let _epoch = gpuspan::epoch_span!(0);
        for step in 0..5 {
            let _step = gpuspan::step_span!(step);
        }
    });
    telemetry.shutdown().expect("nothing lost");
    receiver.spans()
}

fn assert_kept_in_the_parent_s_trace(spans: &[support::receiver::ReceivedSpan]) {
    let epochs: Vec<_> = spans.iter().filter(|s| s.name == "epoch").collect();
    let steps: Vec<_> = spans.iter().filter(|s| s.name == "step").collect();
    assert_eq!(epochs.len(), 1, "{spans:#?}");
    assert_eq!(steps.len(), 5, "{spans:#?}");
    let epoch = epochs[0];
    assert_eq!(epoch.trace_id, TRACE);
    assert_eq!(epoch.parent_span_id, PARENT);
    assert!(steps.iter().all(|step| step.is_child_of(epoch)));
}

#[test]
fn a_sampled_out_parent_loses_no_span() {
    assert_kept_in_the_parent_s_trace(&train_under(TraceFlags::NOT_SAMPLED));
}

#[test]
fn a_sampled_parent_keeps_them_the_same_way() {
    assert_kept_in_the_parent_s_trace(&train_under(TraceFlags::SAMPLED));
}

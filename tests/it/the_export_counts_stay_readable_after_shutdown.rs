//! A program reads the final export counts after shutdown, through the handle it kept: every
//! span produced is either delivered (and the receiver has exactly that many) or lost (and
//! the shutdown error says exactly that many).

use gpuspan_test_support as support;

use std::time::Duration;

use gpuspan::{ShutdownError, Telemetry};
use support::receiver::{unused_endpoint, Receiver};

fn train(telemetry: &Telemetry) {
    let _ = telemetry;
    let _e = gpuspan::epoch_span!(0);
    for step in 0..20 {
        let _s = gpuspan::step_span!(step);
    }
}

#[test]
fn the_counts_after_a_delivered_run_match_what_the_receiver_got() {
    let receiver = Receiver::start_grpc();
    let (telemetry, ()) = support::setup::run(support::setup::to_receiver(&receiver), train);
    let tally = telemetry.export_tally();
    telemetry.shutdown().expect("shutdown");

    let spans = tally.spans();
    assert_eq!(spans.produced, 21, "{spans:?}");
    assert_eq!(spans.delivered, 21, "{spans:?}");
    assert_eq!(spans.lost, 0);
    assert_eq!(spans.pending(), 0);
    assert_eq!(receiver.spans().len() as u64, spans.delivered);
    let points = tally.points();
    assert!(points.produced > 0, "{points:?}");
    assert_eq!(
        points.delivered + points.lost,
        points.produced,
        "{points:?}"
    );
}

#[test]
fn the_counts_after_a_lost_run_match_the_shutdown_error() {
    let builder = Telemetry::builder()
        .endpoint(unused_endpoint())
        .timeout(Duration::from_millis(300))
        .summary(false);
    let (telemetry, ()) = support::setup::run(builder, train);
    let tally = telemetry.export_tally();
    let lost = match telemetry.shutdown() {
        Err(ShutdownError::Dropped { spans, .. }) => spans,
        other => panic!("nothing listens at the endpoint, yet shutdown said {other:?}"),
    };
    let spans = tally.spans();
    assert_eq!(spans.produced, 21, "{spans:?}");
    assert_eq!(spans.delivered, 0, "{spans:?}");
    assert_eq!(spans.lost, lost);
    assert_eq!(spans.lost, 21);
}

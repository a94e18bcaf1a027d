//! With nothing listening at the endpoint, steps keep their pace, shutdown returns within
//! the export timeout, and the spans and points that were lost are counted and reported.

use gpuspan_test_support as support;

use std::time::{Duration, Instant};

use gpuspan::{Protocol, ShutdownError, Telemetry};
use support::receiver::unused_endpoint;

fn run_against_a_dead_collector(protocol: Protocol) {
    let endpoint = unused_endpoint();
    let timeout = Duration::from_millis(1500);
    let builder = Telemetry::builder()
        .endpoint(endpoint.clone())
        .protocol(protocol)
        .timeout(timeout)
        .summary(false);
    let (telemetry, slowest_step) = support::setup::run(builder, |_| {
        let mut slowest = Duration::ZERO;
        for epoch in 0..3 {
            let _e = gpuspan::epoch_span!(epoch);
            for step in 0..200 {
                let started = Instant::now();
                {
                    let _s = gpuspan::step_span!(step);
                    std::thread::sleep(Duration::from_micros(500));
                }
                slowest = slowest.max(started.elapsed());
            }
        }
        slowest
    });
    // A step that waited for the exporter would take at least the export timeout.
    assert!(
        slowest_step < timeout / 3,
        "a step took {slowest_step:?}: the training thread waited for the exporter"
    );

    let started = Instant::now();
    let result = telemetry.shutdown();
    let took = started.elapsed();
    assert!(
        took < timeout * 2 + Duration::from_secs(2),
        "shutdown took {took:?} with a {timeout:?} export timeout"
    );
    match result {
        Err(ShutdownError::Dropped {
            spans,
            points,
            destination,
            ..
        }) => {
            assert_eq!(spans, 603, "every span was lost: 600 steps and 3 epochs");
            assert!(points > 0, "the final metric collection was lost too");
            assert!(
                destination.contains(endpoint.trim_start_matches("http://")),
                "{destination}"
            );
        }
        other => panic!("expected the loss to be reported, got {other:?}"),
    }
}

#[test]
fn over_grpc() {
    run_against_a_dead_collector(Protocol::Grpc);
}

#[test]
fn over_http() {
    run_against_a_dead_collector(Protocol::HttpProtobuf);
}

#[test]
fn the_report_names_counts_and_destination() {
    let error = ShutdownError::Dropped {
        spans: 12,
        points: 3,
        destination: "http://127.0.0.1:9/v1/traces".into(),
        reason: "connection refused".into(),
    };
    assert_eq!(
        error.to_string(),
        "12 span(s) and 3 metric point(s) were not exported to http://127.0.0.1:9/v1/traces: connection refused"
    );
}

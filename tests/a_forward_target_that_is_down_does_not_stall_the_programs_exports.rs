//! When the backend the collector forwards to is down, programs exporting to the collector
//! are still answered at once: requests wait in a bounded queue, and what cannot be
//! delivered is counted as dropped, never lost silently.
#![cfg(feature = "collect")]

use gpuspan_test_support as support;

use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
use support::raw_http::post;

#[test]
fn exports_are_answered_at_once_and_undeliverable_spans_are_counted() {
    let fake = support::fake_nvml::FakeNvml::build();
    let runs = tempfile::tempdir().unwrap();
    let collector = gpuspan::collect::Collector::builder()
        .grpc_addr(None)
        .http_addr(Some("127.0.0.1:0".parse().unwrap()))
        .nvml_lib(fake.path())
        .run_dir(runs.path())
        .endpoint(support::receiver::unused_endpoint())
        .protocol(gpuspan::Protocol::Grpc)
        .start()
        .unwrap();
    let http = collector.http_addr().unwrap();
    // More requests than the queue holds (1024), so the bound is reached.
    let requests: u64 = 1100;
    let mut slowest = Duration::ZERO;
    let started = Instant::now();
    for i in 0..requests {
        let request = ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans {
                scope_spans: vec![ScopeSpans {
                    spans: vec![Span {
                        trace_id: vec![1; 16],
                        span_id: (i + 1).to_be_bytes().to_vec(),
                        name: "step".into(),
                        start_time_unix_nano: 1,
                        end_time_unix_nano: 2,
                        ..Default::default()
                    }],
                    ..Default::default()
                }],
                ..Default::default()
            }],
        };
        let body = prost::Message::encode_to_vec(&request);
        let asked = Instant::now();
        let reply = post(
            http,
            "/v1/traces",
            &[("Content-Type", "application/x-protobuf")],
            &body,
        );
        slowest = slowest.max(asked.elapsed());
        assert_eq!(reply.status, 200, "request {i}: {reply:?}");
    }
    assert!(
        slowest < Duration::from_millis(500),
        "an export waited {slowest:?} for a backend that is down"
    );
    let before = collector.stats();
    assert_eq!(before.spans_received, requests);
    assert!(
        before.spans_dropped >= requests - 1024 - 1,
        "the queue is bounded: {before:?}"
    );
    assert_eq!(before.spans_forwarded, 0);

    let stopping = Instant::now();
    let stats = collector.shutdown(Duration::from_millis(300));
    assert!(stopping.elapsed() < Duration::from_secs(10));
    assert_eq!(stats.spans_forwarded, 0);
    assert_eq!(
        stats.spans_dropped, requests,
        "every span is accounted for: {stats:?}"
    );
    eprintln!(
        "{requests} exports in {:?}, slowest {slowest:?}",
        started.elapsed()
    );
}

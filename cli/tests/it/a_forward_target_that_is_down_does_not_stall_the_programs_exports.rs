//! When the backend the collector forwards to is down, programs exporting to the collector
//! are still answered at once: requests wait in a queue bounded in decoded bytes, those
//! past the bound are refused with a status the exporter retries (503 and `Retry-After`),
//! and what was taken in but cannot be delivered is counted as dropped, never lost
//! silently.

use gpuspan_test_support as support;

use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};
use support::raw_http::post;

fn request(i: u64) -> ExportTraceServiceRequest {
    ExportTraceServiceRequest {
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
    }
}

#[test]
fn exports_are_answered_at_once_and_undeliverable_spans_are_counted() {
    let fake = support::fake_nvml::FakeNvml::build();
    let runs = tempfile::tempdir().unwrap();
    // A queue that holds 1024 of these one-span requests, as the collector decodes them.
    let holds: u64 = 1024;
    let decoded: ExportTraceServiceRequest =
        prost::Message::decode(&prost::Message::encode_to_vec(&request(0))[..]).unwrap();
    let each = gpuspan_cli::collect::queued_bytes(&decoded);
    let collector = gpuspan_cli::collect::Collector::builder()
        .max_queue_bytes(each * holds as usize)
        .grpc_addr(None)
        .http_addr(Some("127.0.0.1:0".parse().unwrap()))
        .nvml_lib(fake.path())
        .run_dir(runs.path())
        .endpoint(support::receiver::unused_endpoint())
        .protocol(gpuspan::Protocol::Grpc)
        .start()
        .unwrap();
    let http = collector.http_addr().unwrap();
    // More requests than the queue holds, so the bound is reached.
    let requests: u64 = 1100;
    let (mut accepted, mut refused) = (0u64, 0u64);
    let mut slowest = Duration::ZERO;
    let started = Instant::now();
    for i in 0..requests {
        let body = prost::Message::encode_to_vec(&request(i));
        let asked = Instant::now();
        let reply = post(
            http,
            "/v1/traces",
            &[("Content-Type", "application/x-protobuf")],
            &body,
        );
        slowest = slowest.max(asked.elapsed());
        match reply.status {
            200 => accepted += 1,
            // The first requests that find the queue full; later ones may find room again
            // once the worker gave up one it could not deliver.
            503 if i >= holds => {
                assert!(reply.header("retry-after").is_some(), "{reply:?}");
                refused += 1;
            }
            _ => panic!("request {i}: {reply:?}"),
        }
    }
    assert!(refused >= 1, "the queue is bounded: {accepted} accepted");
    assert!(
        slowest < Duration::from_millis(500),
        "an export waited {slowest:?} for a backend that is down"
    );
    let before = collector.stats();
    assert_eq!(
        before.spans_received, accepted,
        "refused spans are not received"
    );
    assert_eq!(before.requests_refused, refused, "{before:?}");
    assert_eq!(before.spans_forwarded, 0);

    let stopping = Instant::now();
    let stats = collector.shutdown(Duration::from_millis(300));
    assert!(stopping.elapsed() < Duration::from_secs(10));
    assert_eq!(stats.spans_forwarded, 0);
    assert_eq!(
        stats.spans_dropped, accepted,
        "every span taken in is accounted for: {stats:?}"
    );
    eprintln!(
        "{requests} exports in {:?}, slowest {slowest:?}",
        started.elapsed()
    );
}

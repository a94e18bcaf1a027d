//! When the backend the collector forwards to refuses for a while (down, restarting), the
//! collector keeps what it took in and sends it again with backoff, over either protocol:
//! once the backend is back, every span reaches it, none is counted as dropped, and the
//! counts say so.

use gpuspan_test_support as support;

use std::time::Duration;

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use support::otlp_requests::{sdk_span, traces};
use support::raw_http::post;
use support::receiver::Receiver;

/// A request of `spans` spans named `step`, the `i`th of its kind.
fn request(i: u64, spans: u64) -> ExportTraceServiceRequest {
    traces((0..spans).map(|j| sdk_span(i * 100 + j)).collect())
}

fn outage_then_recovery(backend: Receiver, protocol: gpuspan::Protocol) {
    let fake = support::fake_nvml::FakeNvml::build();
    let runs = tempfile::tempdir().unwrap();
    backend.set_failing(true);
    let collector = gpuspan_cli::collect::Collector::builder()
        .grpc_addr(None)
        .http_addr(Some("127.0.0.1:0".parse().unwrap()))
        .nvml_lib(fake.path())
        .run_dir(runs.path())
        .endpoint(backend.endpoint())
        .protocol(protocol)
        .start()
        .unwrap();
    let http = collector.http_addr().unwrap();
    let (requests, per_request) = (20, 3);
    for i in 0..requests {
        let body = prost::Message::encode_to_vec(&request(i, per_request));
        let reply = post(
            http,
            "/v1/traces",
            &[("Content-Type", "application/x-protobuf")],
            &body,
        );
        assert_eq!(reply.status, 200, "{reply:?}");
    }
    // Long enough for several refused attempts, each retried with backoff.
    std::thread::sleep(Duration::from_millis(1500));
    assert!(
        backend.attempts() >= 2,
        "the collector tried the backend while it was down"
    );
    let during = collector.stats();
    assert_eq!(during.spans_forwarded, 0, "{during:?}");
    assert_eq!(
        during.spans_dropped, 0,
        "nothing is given up while it may be retried"
    );

    backend.set_failing(false);
    let stats = collector.shutdown(Duration::from_secs(20));
    let total = requests * per_request;
    assert_eq!(stats.spans_received, total, "{stats:?}");
    assert_eq!(stats.spans_forwarded, total, "{stats:?}");
    assert_eq!(stats.spans_dropped, 0, "{stats:?}");
    let got = backend.wait_for_spans(|s| s.len() as u64 >= total, Duration::from_secs(5));
    assert_eq!(got.len() as u64, total, "each span arrives once");
}

#[test]
fn over_grpc() {
    outage_then_recovery(Receiver::start_grpc(), gpuspan::Protocol::Grpc);
}

#[test]
fn over_http() {
    outage_then_recovery(Receiver::start_http(), gpuspan::Protocol::HttpProtobuf);
}

//! Malformed OTLP (truncated protobuf, invalid JSON, the wrong content type, bodies over the
//! limit, broken gzip, random bytes) gets the protocol's own error reply over HTTP and gRPC,
//! is counted, and neither crashes the collector nor stalls other clients.

use gpuspan_test_support as support;

use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::trace::v1::Span;
use support::otlp_requests::{sdk_span, traces};
use support::raw_http::{post, Reply};

const LIMIT: usize = 64 << 10;

/// A request of `spans` spans, each named with `name_len` bytes.
fn request(spans: usize, name_len: usize) -> ExportTraceServiceRequest {
    let span = |i: usize| Span {
        name: "x".repeat(name_len),
        ..sdk_span(i as u64)
    };
    traces((0..spans).map(span).collect())
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    gz.write_all(bytes).unwrap();
    gz.finish().unwrap()
}

/// A message whose field 1 (`resource_spans`) holds bytes that are not a `ResourceSpans`.
#[derive(Clone, PartialEq, prost::Message)]
struct Garbage {
    #[prost(bytes = "vec", tag = "1")]
    resource_spans: Vec<u8>,
}

#[test]
fn every_malformed_request_gets_its_error_and_is_counted() {
    let runs = tempfile::tempdir().unwrap();
    let fake = support::fake_nvml::FakeNvml::build();
    let collector = gpuspan_cli::collect::Collector::builder()
        .grpc_addr(Some("127.0.0.1:0".parse().unwrap()))
        .http_addr(Some("127.0.0.1:0".parse().unwrap()))
        .max_request_bytes(LIMIT)
        .nvml_lib(fake.path())
        .run_dir(runs.path())
        .start()
        .unwrap();
    let http = collector.http_addr().unwrap();
    let protobuf = [("Content-Type", "application/x-protobuf")];
    let json = [("Content-Type", "application/json")];
    let valid = prost::Message::encode_to_vec(&request(3, 8));

    // A client that sends half a body and waits holds only its own connection.
    let mut slow = TcpStream::connect(http).unwrap();
    write!(
        slow,
        "POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\n\
         Content-Length: 1000\r\n\r\n0123456789"
    )
    .unwrap();

    let mut rejected = 0;
    let mut expect = |reply: Reply, status: u16, what: &str| {
        assert_eq!(reply.status, status, "{what}: {reply:?}");
        rejected += 1;
        reply
    };
    let reply = expect(
        post(http, "/v1/traces", &protobuf, &valid[..valid.len() / 2]),
        400,
        "truncated protobuf",
    );
    let status: tonic_types::Status = prost::Message::decode(reply.body.as_slice()).unwrap();
    assert_eq!(status.code, 3, "INVALID_ARGUMENT");
    assert!(status.message.contains("protobuf"), "{}", status.message);

    let reply = expect(
        post(http, "/v1/traces", &json, b"{\"resourceSpans\": [{"),
        400,
        "invalid JSON",
    );
    let body: serde_json::Value = serde_json::from_slice(&reply.body).unwrap();
    assert_eq!(body["code"], 3);
    assert_eq!(reply.header("content-type"), Some("application/json"));

    expect(
        post(
            http,
            "/v1/traces",
            &[("Content-Type", "text/plain")],
            &valid,
        ),
        415,
        "wrong content type",
    );
    expect(
        post(http, "/v1/metrics", &[], &valid),
        415,
        "no content type",
    );
    let big = prost::Message::encode_to_vec(&request(1, LIMIT + 10));
    expect(post(http, "/v1/traces", &protobuf, &big), 413, "too large");
    let bomb = gzip(&vec![0u8; 4 * LIMIT]);
    assert!(bomb.len() < LIMIT);
    let gz = [
        ("Content-Type", "application/x-protobuf"),
        ("Content-Encoding", "gzip"),
    ];
    expect(post(http, "/v1/traces", &gz, &bomb), 413, "gzip bomb");
    expect(
        post(http, "/v1/traces", &gz, b"not gzip at all"),
        400,
        "broken gzip",
    );
    expect(
        post(
            http,
            "/v1/traces",
            &[
                ("Content-Type", "application/x-protobuf"),
                ("Content-Encoding", "zstd"),
            ],
            &valid,
        ),
        415,
        "unknown encoding",
    );

    // Random bodies: each is answered, and what fails is a 400.
    let mut seed = 0x2545_F491_4F6C_DD1Du64;
    let mut random_rejected = 0;
    for round in 0..40 {
        let len = 1 + (seed % 300) as usize;
        let body: Vec<u8> = (0..len)
            .map(|_| {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                seed as u8
            })
            .collect();
        let headers = if round % 2 == 0 { &protobuf } else { &json };
        let reply = post(http, "/v1/traces", headers, &body);
        assert!(
            reply.status == 200 || reply.status == 400,
            "random body {round}: {reply:?}"
        );
        if reply.status == 400 {
            random_rejected += 1;
        }
    }
    assert!(
        random_rejected >= 20,
        "only {random_rejected} of 40 rejected"
    );
    rejected += random_rejected;

    // gRPC: a message over the limit, and one that is not a valid request.
    let grpc = format!("http://{}", collector.grpc_addr().unwrap());
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let mut client = TraceServiceClient::connect(grpc.clone()).await.unwrap();
        let too_big = client.export(request(1, LIMIT + 10)).await;
        assert!(too_big.is_err(), "{too_big:?}");
        let channel = tonic::transport::Endpoint::from_shared(grpc.clone())
            .unwrap()
            .connect()
            .await
            .unwrap();
        let mut raw = tonic::client::Grpc::new(channel);
        raw.ready().await.unwrap();
        let codec: tonic_prost::ProstCodec<Garbage, ExportTraceServiceResponse> =
            tonic_prost::ProstCodec::default();
        let garbage = raw
            .unary(
                tonic::Request::new(Garbage {
                    resource_spans: vec![0x0a, 0xff],
                }),
                "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
                    .parse()
                    .unwrap(),
                codec,
            )
            .await;
        let status = garbage.expect_err("a malformed message is an error");
        assert_ne!(status.code(), tonic::Code::Ok);
        // And a good request still goes through.
        client.export(request(2, 8)).await.unwrap();
    });
    rejected += 2;

    // The slow client did not hold anyone up; a valid request now is answered at once.
    let asked = Instant::now();
    let reply = post(http, "/v1/traces", &protobuf, &valid);
    assert_eq!(reply.status, 200);
    assert!(asked.elapsed() < Duration::from_secs(2));
    // Its body, cut short when it goes away, is counted as malformed too.
    drop(slow);
    rejected += 1;

    let stats = collector.shutdown(Duration::from_secs(5));
    assert_eq!(stats.requests_rejected, rejected, "{stats:?}");
    // The two valid requests (3 spans over HTTP, 2 over gRPC), plus any random body that
    // happened to decode.
    assert!(stats.spans_received >= 5, "{stats:?}");
}

//! An empty span is 2 bytes of protobuf and about 264 bytes once decoded, so a 16 MiB body
//! of empty spans, 16 KB gzipped, decodes to 2 GiB. `gpuspan collect` runs beside training
//! processes, where the kernel's OOM killer may pick a training rank: such a request must be
//! refused before it is decoded, with a reply that names the bound and the setting that
//! raises it, over OTLP/HTTP protobuf and JSON and over OTLP/gRPC, one at a time and
//! several at once; the collector's peak resident size stays within its documented bound,
//! and a request of normal size is still received.

use gpuspan_test_support as support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};

use flate2::write::GzEncoder;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceResponse;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceResponse;
use opentelemetry_proto::tonic::common::v1::any_value;
use opentelemetry_proto::tonic::trace::v1::Span;
use support::collector_process::{CollectorProcess, Memory, MIB};
use support::otlp_json::unix_nanos;
use support::otlp_requests::{empty_spans_resource, field, kv, sdk_span, traces};
use support::raw_http::{post, Reply};
use tonic::codec::CompressionEncoding;

/// What the runtime, the sampler, the connections' buffers and the allocator's free lists
/// may add to the resident size besides the requests.
const SLACK: u64 = 48 * MIB;

/// The largest body the collector takes by default.
const LIMIT: usize = gpuspan_cli::collect::DEFAULT_MAX_REQUEST_BYTES;

/// One `ResourceSpans` (field 1 of the request) holding one `ScopeSpans` (its field 2) of
/// empty spans (field 2 of `ScopeSpans`, `0x12 0x00` each), the whole request at most
/// `bytes`. The same bytes read as metrics are empty `Metric`s, in the same nesting.
fn empty_spans(bytes: usize) -> (Vec<u8>, Vec<u8>) {
    let resource = empty_spans_resource((bytes - 16) / 2);
    let request = field(1, &resource);
    assert!(request.len() <= bytes);
    (request, resource)
}

/// The same nesting in OTLP/JSON: an array of empty objects, 3 bytes each.
fn empty_objects_json(outer: &str, middle: &str, inner: &str, bytes: usize) -> Vec<u8> {
    let head = format!("{{\"{outer}\":[{{\"{middle}\":[{{\"{inner}\":[{{}}");
    let tail = "]}]}]}";
    let count = (bytes - head.len() - tail.len()) / 3;
    let mut body = Vec::with_capacity(bytes);
    body.extend_from_slice(head.as_bytes());
    for _ in 0..count {
        body.extend_from_slice(b",{}");
    }
    body.extend_from_slice(tail.as_bytes());
    assert!(body.len() <= bytes);
    body
}

fn gzip(body: &[u8]) -> Vec<u8> {
    let mut gz = GzEncoder::new(Vec::new(), flate2::Compression::best());
    gz.write_all(body).unwrap();
    gz.finish().unwrap()
}

/// A request shaped like `ExportTraceServiceRequest` whose `resource_spans` are given as
/// encoded bytes, so the test sends the hostile bytes over gRPC without decoding them
/// itself; the same bytes are a metrics request's `resource_metrics`.
#[derive(Clone, PartialEq, prost::Message)]
struct Opaque {
    #[prost(bytes = "vec", tag = "1")]
    resource: Vec<u8>,
}

/// One hostile request and how it is sent.
#[derive(Clone, Copy, Debug)]
enum Kind {
    HttpProtobufTraces,
    HttpProtobufMetrics,
    HttpJsonTraces,
    HttpJsonMetrics,
    GrpcTraces,
    GrpcMetrics,
}

const KINDS: [Kind; 6] = [
    Kind::HttpProtobufTraces,
    Kind::HttpProtobufMetrics,
    Kind::HttpJsonTraces,
    Kind::HttpJsonMetrics,
    Kind::GrpcTraces,
    Kind::GrpcMetrics,
];

struct Bodies {
    protobuf_gz: Vec<u8>,
    resource: Vec<u8>,
    traces_json_gz: Vec<u8>,
    metrics_json_gz: Vec<u8>,
}

impl Bodies {
    fn new() -> Self {
        let (protobuf, resource) = empty_spans(LIMIT);
        let protobuf_gz = gzip(&protobuf);
        let traces_json_gz = gzip(&empty_objects_json(
            "resourceSpans",
            "scopeSpans",
            "spans",
            LIMIT,
        ));
        let metrics_json_gz = gzip(&empty_objects_json(
            "resourceMetrics",
            "scopeMetrics",
            "metrics",
            LIMIT,
        ));
        eprintln!(
            "bodies: {} bytes of protobuf, {} gzipped; JSON {} and {} gzipped",
            protobuf.len(),
            protobuf_gz.len(),
            traces_json_gz.len(),
            metrics_json_gz.len()
        );
        assert!(protobuf_gz.len() < 64 << 10);
        Self {
            protobuf_gz,
            resource,
            traces_json_gz,
            metrics_json_gz,
        }
    }
}

/// What the collector answered: an HTTP status and body, or a gRPC status.
#[derive(Debug)]
enum Answer {
    Http(Reply),
    Grpc(Result<(), tonic::Status>),
}

fn send(kind: Kind, bodies: &Bodies, collector: (SocketAddr, SocketAddr)) -> Answer {
    let (http, grpc) = collector;
    let http_post = |path: &str, content_type: &str, body: &[u8]| {
        Answer::Http(post(
            http,
            path,
            &[("Content-Type", content_type), ("Content-Encoding", "gzip")],
            body,
        ))
    };
    match kind {
        Kind::HttpProtobufTraces => {
            http_post("/v1/traces", "application/x-protobuf", &bodies.protobuf_gz)
        }
        Kind::HttpProtobufMetrics => {
            http_post("/v1/metrics", "application/x-protobuf", &bodies.protobuf_gz)
        }
        Kind::HttpJsonTraces => http_post("/v1/traces", "application/json", &bodies.traces_json_gz),
        Kind::HttpJsonMetrics => {
            http_post("/v1/metrics", "application/json", &bodies.metrics_json_gz)
        }
        Kind::GrpcTraces | Kind::GrpcMetrics => {
            let path = if matches!(kind, Kind::GrpcTraces) {
                "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
            } else {
                "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export"
            };
            let request = Opaque {
                resource: bodies.resource.clone(),
            };
            Answer::Grpc(grpc_gzip(
                grpc,
                path,
                request,
                matches!(kind, Kind::GrpcTraces),
            ))
        }
    }
}

/// Sends `request` to `path` with `grpc-encoding: gzip`.
fn grpc_gzip(
    addr: SocketAddr,
    path: &'static str,
    request: Opaque,
    traces: bool,
) -> Result<(), tonic::Status> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async move {
        let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))
            .unwrap()
            .connect()
            .await
            .map_err(|e| tonic::Status::unavailable(format!("connect: {e}")))?;
        let mut grpc = tonic::client::Grpc::new(channel)
            .send_compressed(CompressionEncoding::Gzip)
            .max_encoding_message_size(usize::MAX);
        grpc.ready()
            .await
            .map_err(|e| tonic::Status::unavailable(format!("ready: {e}")))?;
        let path = tonic::codegen::http::uri::PathAndQuery::from_static(path);
        if traces {
            let codec = tonic_prost::ProstCodec::<Opaque, ExportTraceServiceResponse>::default();
            grpc.unary(tonic::Request::new(request), path, codec)
                .await
                .map(drop)
        } else {
            let codec = tonic_prost::ProstCodec::<Opaque, ExportMetricsServiceResponse>::default();
            grpc.unary(tonic::Request::new(request), path, codec)
                .await
                .map(drop)
        }
    })
}

/// The answer is a refusal for being too large (HTTP 413, gRPC `RESOURCE_EXHAUSTED`) whose
/// message says what the bound is and which setting raises it.
fn assert_refused_as_too_large(kind: Kind, answer: &Answer) {
    let bound = gpuspan_cli::collect::DEFAULT_MAX_QUEUE_BYTES.to_string();
    let message = match answer {
        Answer::Http(reply) => {
            assert_eq!(reply.status, 413, "{kind:?}: {reply:?}");
            String::from_utf8_lossy(&reply.body).into_owned()
        }
        Answer::Grpc(Err(status)) => {
            assert_eq!(
                status.code(),
                tonic::Code::ResourceExhausted,
                "{kind:?}: {status:?}"
            );
            status.message().to_owned()
        }
        Answer::Grpc(Ok(())) => panic!("{kind:?}: a 2 GiB request was received"),
    };
    assert!(
        message.contains(&bound) && message.contains("--max-queue-bytes"),
        "{kind:?}: the refusal names the bound ({bound} bytes) and the setting: {message}"
    );
}

/// `POST path` with `body` sent in chunks, with no length (`Transfer-Encoding: chunked`):
/// the status and body of the reply.
fn post_chunked(addr: SocketAddr, path: &str, encoding: &str, body: &[u8]) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(std::time::Duration::from_secs(60)))
        .unwrap();
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Type: \
         application/x-protobuf\r\nContent-Encoding: {encoding}\r\nTransfer-Encoding: \
         chunked\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).unwrap();
    // The server may answer (413) and close before the body ends.
    let _ = (|| -> std::io::Result<()> {
        for chunk in body.chunks(64 << 10) {
            stream.write_all(format!("{:x}\r\n", chunk.len()).as_bytes())?;
            stream.write_all(chunk)?;
            stream.write_all(b"\r\n")?;
        }
        stream.write_all(b"0\r\n\r\n")
    })();
    let mut raw = Vec::new();
    let _ = stream.read_to_end(&mut raw);
    let text = String::from_utf8_lossy(&raw).into_owned();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no HTTP reply: {text:?}"));
    (status, text)
}

fn memory_line(what: &str, memory: Memory) -> String {
    format!(
        "{what}: RSS {} MiB, peak {} MiB",
        memory.now / MIB,
        memory.peak / MIB
    )
}

/// An OTLP/HTTP protobuf request as an SDK's batch processor sends it (512 spans), dated
/// now.
fn normal_request() -> Vec<u8> {
    let now = unix_nanos();
    let spans = (0..512u64)
        .map(|i| Span {
            start_time_unix_nano: now - 2_000_000,
            end_time_unix_nano: now - 1_000_000,
            attributes: vec![kv("ml.step", any_value::Value::IntValue(i as i64))],
            ..sdk_span(i)
        })
        .collect();
    prost::Message::encode_to_vec(&traces(spans))
}

#[test]
fn empty_spans_that_decode_to_gigabytes_are_refused_and_memory_stays_bounded() {
    let collector = CollectorProcess::forwarding_nowhere(env!("CARGO_BIN_EXE_gpuspan"), &[], &[]);
    let bodies = Bodies::new();
    let baseline = collector.memory();
    // The documented bound: the queue's bound in decoded bytes, plus the bodies of the
    // requests being read and decompressed at once.
    let queue = gpuspan_cli::collect::DEFAULT_MAX_QUEUE_BYTES as u64;
    let reading = gpuspan_cli::collect::DEFAULT_MAX_CONCURRENT_REQUESTS as u64 * 2 * LIMIT as u64;
    let documented = baseline.now + queue + reading + SLACK;
    // Nothing is decoded, so none of the queue's bound is taken.
    let undecoded = baseline.now + reading + SLACK;
    eprintln!(
        "{}; documented bound {} MiB; refused undecoded, at most {} MiB",
        memory_line("baseline", baseline),
        documented / MIB,
        undecoded / MIB
    );
    let addrs = (collector.http, collector.grpc);
    let check = |what: &str| {
        let memory = collector.memory();
        eprintln!("{}", memory_line(what, memory));
        assert!(
            memory.peak <= documented,
            "after {what} the collector's peak RSS is {} MiB, over its documented bound of \
             {} MiB",
            memory.peak / MIB,
            documented / MIB
        );
        assert!(
            memory.peak <= undecoded,
            "after {what} the collector's peak RSS is {} MiB: the refused requests were \
             decoded (at most {} MiB if refused before decoding)",
            memory.peak / MIB,
            undecoded / MIB
        );
    };

    // One at a time: each is refused, and the peak stays bounded.
    for kind in KINDS {
        let answer = send(kind, &bodies, addrs);
        check(&format!("{kind:?}"));
        assert_refused_as_too_large(kind, &answer);
    }

    // Several at once, on connections of their own.
    let answers: Vec<(Kind, Answer)> = std::thread::scope(|scope| {
        let threads: Vec<_> = KINDS
            .iter()
            .chain(KINDS.iter())
            .map(|&kind| {
                let bodies = &bodies;
                scope.spawn(move || (kind, send(kind, bodies, addrs)))
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    });
    check("12 requests at once");
    for (kind, answer) in &answers {
        assert_refused_as_too_large(*kind, answer);
    }

    // Chunked, with no length: the gzip bomb is refused as above, and a body that goes on
    // past the limit is cut at it.
    let (status, text) = post_chunked(collector.http, "/v1/traces", "gzip", &bodies.protobuf_gz);
    assert_eq!(status, 413, "{text}");
    assert!(text.contains("--max-queue-bytes"), "{text}");
    let endless = vec![0x0a; LIMIT + (4 << 20)];
    let (status, text) = post_chunked(collector.http, "/v1/traces", "identity", &endless);
    assert_eq!(status, 413, "{text}");
    assert!(text.contains(&format!("over {LIMIT} bytes")), "{text}");
    check("chunked bodies");

    // A request of normal size is received as before.
    let reply = post(
        collector.http,
        "/v1/traces",
        &[("Content-Type", "application/x-protobuf")],
        &normal_request(),
    );
    assert_eq!(reply.status, 200, "{reply:?}");

    let summary = collector.summary();
    assert!(
        summary.contains("512 spans received"),
        "only the normal request was received: {summary}"
    );
    assert!(
        summary.contains(&format!("{} requests rejected", 3 * KINDS.len() + 2)),
        "every refusal is counted: {summary}"
    );
}

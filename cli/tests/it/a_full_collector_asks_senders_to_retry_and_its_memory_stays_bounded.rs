//! When the forward target is down and `gpuspan collect`'s queue is full, the collector
//! answers what makes an OTLP exporter keep its batch and send it again (HTTP 503 with
//! `Retry-After`, gRPC `UNAVAILABLE`), counts each refusal, and its memory stays within the
//! queue's documented bound in decoded bytes, however many 16 MiB requests arrive.

use gpuspan_test_support as support;

use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_client::TraceServiceClient;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value;
use opentelemetry_proto::tonic::trace::v1::{status, Span, Status};
use support::collector_process::{CollectorProcess, Memory, MIB};
use support::otlp_requests::{kv, sdk_span, service_traces};
use support::raw_http::post;

/// The allocator's slack: memory freed but not yet given back to the system, and what the
/// runtime, the sampler and the buffers of the connections hold.
const SLACK: u64 = 48 * MIB;

/// A request of about `bytes` encoded bytes, of spans shaped as an OpenTelemetry SDK sends
/// them (ids, a parent, a status and a handful of attributes).
fn request_of(bytes: usize) -> ExportTraceServiceRequest {
    let span = |i: u64| Span {
        attributes: vec![
            kv("ml.step", any_value::Value::IntValue(i as i64)),
            kv("ml.epoch", any_value::Value::IntValue(3)),
            kv("batch_size", any_value::Value::IntValue(256)),
            kv("loss", any_value::Value::DoubleValue(0.25)),
            kv("phase", any_value::Value::StringValue("train".into())),
            kv("model", any_value::Value::StringValue("resnet50".into())),
        ],
        status: Some(Status {
            message: String::new(),
            code: status::StatusCode::Ok as i32,
        }),
        ..sdk_span(i)
    };
    let (mut spans, mut size) = (Vec::new(), 64);
    while size < bytes {
        let next = span(spans.len() as u64);
        size += prost::Message::encoded_len(&next) + 4;
        spans.push(next);
    }
    service_traces("train", spans)
}

#[test]
fn sixteen_mib_requests_past_the_queue_get_retry_later_and_rss_stays_bounded() {
    let collector = CollectorProcess::forwarding_nowhere(env!("CARGO_BIN_EXE_gpuspan"), &[], &[]);

    let request = request_of((16 * MIB - 64 * 1024) as usize);
    let body = prost::Message::encode_to_vec(&request);
    assert!(body.len() as u64 <= 16 * MIB);
    let baseline = collector.memory().now;
    let bound = gpuspan_cli::collect::DEFAULT_MAX_QUEUE_BYTES as u64;
    // Besides the queue, what one request in flight holds while it is read, decoded and
    // queued or refused (the test sends one at a time): its body and its decoded form.
    let in_flight = body.len() as u64 + gpuspan_cli::collect::queued_bytes(&request) as u64;
    let allowance = in_flight + SLACK;
    let limit = baseline + bound + allowance;
    eprintln!(
        "baseline {} MiB, queue bound {} MiB, allowance {} MiB (a request in flight {} MiB)",
        baseline / MIB,
        bound / MIB,
        allowance / MIB,
        in_flight / MIB
    );

    // More 16 MiB requests than the queue holds, one at a time; once the queue is full
    // the answers are "retry later", and the peak RSS never passes the bound.
    let (mut accepted, mut refused) = (0u64, 0u64);
    let started = Instant::now();
    for i in 0..40 {
        let reply = post(
            collector.http,
            "/v1/traces",
            &[("Content-Type", "application/x-protobuf")],
            &body,
        );
        let Memory { peak, now } = collector.memory();
        eprintln!(
            "request {i}: HTTP {} after {:?}; RSS {} MiB, peak {} MiB",
            reply.status,
            started.elapsed(),
            now / MIB,
            peak / MIB
        );
        assert!(
            peak <= limit,
            "after request {i} ({accepted} accepted, {refused} refused) the collector's \
             peak RSS is {} MiB: over its {} MiB baseline + the {} MiB queue bound + {} MiB",
            peak / MIB,
            baseline / MIB,
            bound / MIB,
            allowance / MIB
        );
        match reply.status {
            200 => accepted += 1,
            503 => {
                let after = reply
                    .header("retry-after")
                    .unwrap_or_else(|| panic!("a 503 without Retry-After: {:?}", reply.headers));
                assert!(
                    after.parse::<u32>().is_ok_and(|s| s >= 1),
                    "Retry-After: {after}"
                );
                refused += 1;
            }
            other => panic!("request {i}: HTTP {other}: {reply:?}"),
        }
        if refused >= 3 || started.elapsed() > Duration::from_secs(120) {
            break;
        }
    }
    assert!(accepted >= 1, "the first requests fit the queue");
    assert!(
        refused >= 3,
        "{accepted} accepted, none refused: the queue is not bounded"
    );

    // The same over gRPC: UNAVAILABLE, which OTLP/gRPC exporters retry.
    let grpc_refused = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(async {
            let mut client = TraceServiceClient::connect(format!("http://{}", collector.grpc))
                .await
                .unwrap()
                .max_encoding_message_size(usize::MAX);
            let mut refused = 0u64;
            for _ in 0..10 {
                match client.export(request.clone()).await {
                    Ok(_) => {}
                    Err(status) => {
                        assert_eq!(status.code(), tonic::Code::Unavailable, "{status:?}");
                        refused += 1;
                        break;
                    }
                }
            }
            refused
        });
    assert_eq!(
        grpc_refused, 1,
        "gRPC answers UNAVAILABLE once the queue is full"
    );
    let peak = collector.memory().peak;
    assert!(peak <= limit, "peak RSS {} MiB after gRPC", peak / MIB);

    let summary = collector.summary();
    // The count just before `phrase`.
    let number_before = |phrase: &str| -> u64 {
        let (before, _) = summary
            .split_once(phrase)
            .unwrap_or_else(|| panic!("no '{phrase}' in: {summary}"));
        before
            .trim_end_matches([' ', ',', ';'])
            .rsplit(' ')
            .next()
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no count before '{phrase}' in: {summary}"))
    };
    assert_eq!(
        number_before("requests refused"),
        refused + grpc_refused,
        "every refusal is counted: {summary}"
    );
    assert_eq!(
        number_before("requests rejected"),
        0,
        "a refusal is not an error: {summary}"
    );
    let received = number_before("spans received");
    assert_eq!(
        received,
        number_before("forwarded") + number_before("dropped"),
        "every span taken in is forwarded or counted as dropped: {summary}"
    );
    assert_eq!(
        received % request.resource_spans[0].scope_spans[0].spans.len() as u64,
        0
    );
}

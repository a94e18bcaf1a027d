//! The forward queue's bound counts what a request holds once its spans carry their memory
//! figures: with 8 devices, enrichment adds some 40 attributes to every span, several times
//! what the span held as received. With the forward target down, senders at once filling
//! the queue with spans dated now, `gpuspan collect`'s peak resident size stays within its
//! bound, and the spans did get their figures.

use gpuspan_test_support as support;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::common::v1::any_value;
use opentelemetry_proto::tonic::trace::v1::{status, Span, Status};
use support::collector_process::{CollectorProcess, MIB};
use support::otlp_json::unix_nanos;
use support::otlp_requests::{kv, service_traces};
use support::raw_http::post;

/// The queue's bound for this test: small, so that it fills quickly.
const BOUND: u64 = 128 * MIB;

/// Spans per request: an SDK-shaped span is about 130 bytes of protobuf.
const SPANS: u64 = 4000;

/// Senders at once.
const SENDERS: usize = 4;

/// What the runtime, the sampler, the connections' buffers and the allocator's free lists
/// may add to the resident size besides the requests.
const SLACK: u64 = 48 * MIB;

/// `SPANS` spans as an OpenTelemetry SDK sends them, each ending a millisecond ago.
fn request_now(sender: usize, sequence: u64) -> Vec<u8> {
    let now = unix_nanos();
    let spans = (0..SPANS)
        .map(|i| Span {
            trace_id: vec![sender as u8; 16],
            span_id: (sequence * SPANS + i + 1).to_be_bytes().to_vec(),
            parent_span_id: vec![9; 8],
            name: "step".into(),
            kind: 1,
            start_time_unix_nano: now - 3_000_000,
            end_time_unix_nano: now - 1_000_000,
            attributes: vec![
                kv("ml.step", any_value::Value::IntValue(i as i64)),
                kv("ml.epoch", any_value::Value::IntValue(3)),
                kv("batch_size", any_value::Value::IntValue(256)),
                kv("phase", any_value::Value::StringValue("train".into())),
            ],
            status: Some(Status {
                message: String::new(),
                code: status::StatusCode::Ok as i32,
            }),
            ..Default::default()
        })
        .collect();
    let request = service_traces("train", spans);
    prost::Message::encode_to_vec(&request)
}

/// Sends requests until two are refused (or a bounded number were sent): the accepted and
/// refused counts.
fn sender(http: SocketAddr, index: usize, started: Instant) -> (u64, u64) {
    let (mut accepted, mut refused) = (0, 0);
    for sequence in 0..25 {
        let body = request_now(index, sequence);
        let reply = post(
            http,
            "/v1/traces",
            &[("Content-Type", "application/x-protobuf")],
            &body,
        );
        match reply.status {
            200 => accepted += 1,
            503 => refused += 1,
            other => panic!("sender {index}: HTTP {other}: {reply:?}"),
        }
        if refused >= 2 || started.elapsed() > Duration::from_secs(90) {
            break;
        }
    }
    (accepted, refused)
}

#[test]
fn eight_devices_of_figures_on_spans_dated_now_stay_within_the_queue_bound() {
    let collector = CollectorProcess::forwarding_nowhere(
        env!("CARGO_BIN_EXE_gpuspan"),
        &["--max-queue-bytes", &BOUND.to_string()],
        &[("FAKE_NVML_DEVICES", "8")],
    );
    let body = request_now(0, 0).len() as u64;
    let baseline = collector.memory();
    // The documented bound: the queue's, plus the bodies being read and decompressed.
    let reading = gpuspan_cli::collect::DEFAULT_MAX_CONCURRENT_REQUESTS as u64 * 2 * body;
    let limit = baseline.now + BOUND + reading + SLACK;
    eprintln!(
        "baseline RSS {} MiB; requests of {SPANS} spans, {} KiB; limit {} MiB",
        baseline.now / MIB,
        body / 1024,
        limit / MIB
    );

    let started = Instant::now();
    let counts: Vec<(u64, u64)> = std::thread::scope(|scope| {
        let threads: Vec<_> = (0..SENDERS)
            .map(|i| scope.spawn(move || sender(collector.http, i, started)))
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    });
    let accepted: u64 = counts.iter().map(|c| c.0).sum();
    let refused: u64 = counts.iter().map(|c| c.1).sum();
    // Let the queue's thread enrich what it took in.
    std::thread::sleep(Duration::from_millis(500));
    let memory = collector.memory();
    eprintln!(
        "{accepted} accepted, {refused} refused after {:?}: RSS {} MiB, peak {} MiB",
        started.elapsed(),
        memory.now / MIB,
        memory.peak / MIB
    );
    assert!(accepted >= 1, "the first requests fit the queue");
    assert!(
        refused >= 1,
        "{accepted} requests of {SPANS} spans accepted, none refused: the queue is not \
         bounded"
    );
    assert!(
        memory.peak <= limit,
        "the collector's peak RSS is {} MiB with {accepted} requests queued: over its {} MiB \
         baseline + the {} MiB queue bound + {} MiB",
        memory.peak / MIB,
        baseline.now / MIB,
        BOUND / MIB,
        (reading + SLACK) / MIB
    );

    let summary = collector.summary();
    let enriched = summary
        .split_once(" given GPU memory")
        .and_then(|(before, _)| before.rsplit(' ').next())
        .and_then(|n| n.parse::<u64>().ok())
        .unwrap_or_else(|| panic!("no enriched count in: {summary}"));
    assert_eq!(
        enriched,
        accepted * SPANS,
        "every span taken in got its memory figures: {summary}"
    );
}

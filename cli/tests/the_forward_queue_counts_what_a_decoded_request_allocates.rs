// A test binary of its own: it counts every allocation of the process.
//! The forward queue is bounded in bytes of decoded requests, so its measure of a request
//! must be what decoding one really allocates: measured here with a counting allocator, for
//! spans as SDKs send them, for many tiny attributes, and for large string values.

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value;
use opentelemetry_proto::tonic::trace::v1::{span, Span};

use gpuspan_test_support::counting_alloc::{live, Counting};
use gpuspan_test_support::otlp_requests::{kv, traces};

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn sdk_span(i: u64) -> Span {
    Span {
        attributes: vec![
            kv("ml.step", any_value::Value::IntValue(i as i64)),
            kv("ml.epoch", any_value::Value::IntValue(3)),
            kv("phase", any_value::Value::StringValue("train".into())),
        ],
        events: vec![span::Event {
            name: "checkpoint".into(),
            attributes: vec![kv("path", any_value::Value::StringValue("/ckpt".into()))],
            ..Default::default()
        }],
        ..gpuspan_test_support::otlp_requests::sdk_span(i)
    }
}

/// The bytes decoding `encoded` leaves allocated, and the queue's measure of the result.
fn allocated_and_measured(encoded: &[u8]) -> (usize, usize, usize) {
    let before = live();
    let decoded: ExportTraceServiceRequest = prost::Message::decode(encoded).unwrap();
    let allocated = live() - before + std::mem::size_of::<ExportTraceServiceRequest>();
    let measured = gpuspan_cli::collect::queued_bytes(&decoded);
    (allocated, measured, encoded.len())
}

fn check(what: &str, request: &ExportTraceServiceRequest) {
    let encoded = prost::Message::encode_to_vec(request);
    let (allocated, measured, encoded) = allocated_and_measured(&encoded);
    eprintln!(
        "{what}: {encoded} bytes encoded, {allocated} allocated once decoded ({:.1}x), \
         measured {measured}",
        allocated as f64 / encoded as f64
    );
    assert!(
        measured >= allocated,
        "{what}: measured {measured} < {allocated} allocated"
    );
    // The allocator's overhead per allocation is counted too; never more than that.
    assert!(
        measured <= allocated * 3 / 2 + 64,
        "{what}: measured {measured}, far over {allocated} allocated"
    );
}

/// One test, so that no other test thread allocates while one is counted.
#[test]
fn sdk_spans_tiny_attributes_and_large_strings_are_measured_as_allocated() {
    check("SDK spans", &traces((0..20_000).map(sdk_span).collect()));

    let tiny = Span {
        attributes: (0..50_000)
            .map(|i| kv("", any_value::Value::IntValue(i % 2)))
            .collect(),
        ..Default::default()
    };
    check("tiny attributes", &traces(vec![tiny]));

    let large = Span {
        name: "generate".into(),
        attributes: vec![kv(
            "prompt",
            any_value::Value::StringValue("x".repeat(4 << 20)),
        )],
        ..Default::default()
    };
    check("large strings", &traces(vec![large; 3]));
}

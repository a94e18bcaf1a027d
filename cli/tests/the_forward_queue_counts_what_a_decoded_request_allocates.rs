// A test binary of its own: it counts every allocation of the process.
//! The forward queue is bounded in bytes of decoded requests, so its measure of a request
//! must be what decoding one really allocates: measured here with a counting allocator, for
//! spans as SDKs send them, for many tiny attributes, and for large string values.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
use opentelemetry_proto::tonic::trace::v1::{span, ResourceSpans, ScopeSpans, Span, Status};

/// Bytes allocated and not yet freed, by every thread of the test binary.
struct Counting;
static LIVE: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is passed on to the system allocator unchanged; only counted.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size(), Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(new_size, Ordering::Relaxed);
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn kv(key: &str, value: any_value::Value) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue { value: Some(value) }),
        ..Default::default()
    }
}

fn request(spans: Vec<Span>) -> ExportTraceServiceRequest {
    ExportTraceServiceRequest {
        resource_spans: vec![ResourceSpans {
            scope_spans: vec![ScopeSpans {
                spans,
                ..Default::default()
            }],
            ..Default::default()
        }],
    }
}

fn sdk_span(i: u64) -> Span {
    Span {
        trace_id: vec![7; 16],
        span_id: (i + 1).to_be_bytes().to_vec(),
        parent_span_id: vec![9; 8],
        name: "step".into(),
        kind: 1,
        start_time_unix_nano: 1_700_000_000_000_000_000 + i,
        end_time_unix_nano: 1_700_000_000_000_100_000 + i,
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
        status: Some(Status {
            message: "ok".into(),
            code: 1,
        }),
        ..Default::default()
    }
}

/// The bytes decoding `encoded` leaves allocated, and the queue's measure of the result.
fn allocated_and_measured(encoded: &[u8]) -> (usize, usize, usize) {
    let before = LIVE.load(Ordering::Relaxed);
    let decoded: ExportTraceServiceRequest = prost::Message::decode(encoded).unwrap();
    let allocated =
        LIVE.load(Ordering::Relaxed) - before + std::mem::size_of::<ExportTraceServiceRequest>();
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
    check("SDK spans", &request((0..20_000).map(sdk_span).collect()));

    let tiny = Span {
        attributes: (0..50_000)
            .map(|i| kv("", any_value::Value::IntValue(i % 2)))
            .collect(),
        ..Default::default()
    };
    check("tiny attributes", &request(vec![tiny]));

    let large = Span {
        name: "generate".into(),
        attributes: vec![kv(
            "prompt",
            any_value::Value::StringValue("x".repeat(4 << 20)),
        )],
        ..Default::default()
    };
    check("large strings", &request(vec![large; 3]));
}

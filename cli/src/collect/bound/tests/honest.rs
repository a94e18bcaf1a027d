//! Honest requests, as SDKs send them: the bound is at least what decoding holds and, for
//! protobuf, within a few percent of it, so that a request that fits is not refused.

use super::*;

/// For honest protobuf requests the bound is what decoding holds, within a few percent, so
/// that a request that fits is not refused.
#[test]
fn honest_protobuf_requests_are_bounded_tightly() {
    let cases = [
        ("SDK spans", traces_of((0..5000).map(sdk_span).collect())),
        ("rich spans", traces_of((0..700).map(rich_span).collect())),
        ("one span", traces_of(vec![sdk_span(1)])),
        ("empty", ExportTraceServiceRequest::default()),
    ];
    for (what, request) in cases {
        let body = prost::Message::encode_to_vec(&request);
        let (bound, measured) = check_traces(what, Format::Protobuf, &body);
        assert!(
            bound <= measured + measured / 50,
            "{what}: bound {bound} far over {measured} measured"
        );
    }
    let body = prost::Message::encode_to_vec(&every_metric());
    let (bound, measured) = check_metrics("every metric", Format::Protobuf, &body);
    assert!(bound <= measured + measured / 50, "{bound} vs {measured}");
}

/// JSON: at least what decoding holds, and for spans not wildly more.
#[test]
fn honest_json_requests_are_bounded() {
    for (what, request) in [
        ("SDK spans", traces_of((0..2000).map(sdk_span).collect())),
        ("rich spans", traces_of((0..300).map(rich_span).collect())),
    ] {
        let body = serde_json::to_vec(&request).unwrap();
        let (bound, measured) = check_traces(what, Format::Json, &body);
        assert!(bound <= 3 * measured, "{what}: bound {bound} vs {measured}");
    }
    // A metric's data points are read through serde's generic tree (`Metric` flattens its
    // `oneof`), several times the size of the decoded points while the metric is read.
    let body = serde_json::to_vec(&every_metric()).unwrap();
    let (bound, measured) = check_metrics("every metric", Format::Json, &body);
    assert!(bound <= 16 * measured, "{bound} vs {measured}");
}

/// Empty spans: 2 bytes each on the wire, a whole `Span` decoded.
#[test]
fn empty_spans_count_as_decoded_spans() {
    let spans = 100_000;
    let body = field(1, &field(2, &[0x12, 0x00].repeat(spans)));
    let (bound, measured) = check_traces("empty spans", Format::Protobuf, &body);
    assert!(bound >= spans * std::mem::size_of::<Span>());
    assert!(bound <= measured + measured / 50, "{bound} vs {measured}");
    assert!(bound > 100 * body.len());

    let json = format!(
        "{{\"resourceSpans\":[{{\"scopeSpans\":[{{\"spans\":[{}{{}}]}}]}}]}}",
        "{},".repeat(spans - 1)
    );
    let (bound, _) = check_traces("empty JSON spans", Format::Json, json.as_bytes());
    assert!(bound >= spans * std::mem::size_of::<Span>());
}

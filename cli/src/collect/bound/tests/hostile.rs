//! Requests made to cost more decoded than they seem: repeated single fields, deep JSON
//! values, arrays for objects and corrupted bodies are bounded by what decoding them takes,
//! or refused, and never panic.

use super::*;

/// A single field given several times is merged by prost: a resource's attributes across
/// its repeats, a span's name replaced, an `arrayValue` merged; the bound holds whatever
/// the split.
#[test]
fn repeated_single_fields_are_bounded_as_prost_merges_them() {
    let attribute = prost::Message::encode_to_vec(&kv("k", any_value::Value::IntValue(1)));
    for split in [1usize, 2, 3, 5, 8, 9, 17, 33] {
        // `resource` 3 times, with `split`, 1 and `split` attributes.
        let attrs = |n: usize| field(1, &attribute).repeat(n);
        let mut resource_spans = Vec::new();
        for n in [split, 1, split] {
            resource_spans.extend(field(1, &attrs(n)));
        }
        // A span whose name is given 3 times, growing, and whose attribute's value is
        // given twice as an array.
        let array = |n: usize| {
            let value = prost::Message::encode_to_vec(&AnyValue {
                value: Some(any_value::Value::IntValue(7)),
            });
            field(5, &field(1, &value).repeat(n))
        };
        let mut value = array(split);
        value.extend(array(1));
        let mut attribute = field(1, b"nested");
        attribute.extend(field(2, &value));
        let mut span = Vec::new();
        for len in [3, 40, 200] {
            span.extend(field(5, &vec![b'x'; len * split]));
        }
        span.extend(field(9, &attribute));
        span.extend(field(9, &attribute));
        resource_spans.extend(field(2, &field(2, &span)));
        let body = field(1, &resource_spans);
        check_traces(&format!("split {split}"), Format::Protobuf, &body);
    }
}

/// Nested `AnyValue`s in JSON are copied once per level by serde: a deep chain of arrays
/// over many values is bounded by what those copies take, far above its decoded size.
#[test]
fn nested_json_values_count_each_copy() {
    let mut value = format!(
        "{{\"arrayValue\":{{\"values\":[{}{{}}]}}}}",
        "{},".repeat(500)
    );
    for _ in 0..20 {
        value = format!("{{\"arrayValue\":{{\"values\":[{value}]}}}}");
    }
    let body = format!(
        "{{\"resourceSpans\":[{{\"scopeSpans\":[{{\"spans\":[{{\"attributes\":[{{\"key\":\"a\",\
         \"value\":{value}}}]}}]}}]}}]}}"
    );
    let (bound, measured) = check_traces("nested", Format::Json, body.as_bytes());
    assert!(bound > 10 * measured, "{bound} vs {measured}");
}

/// OTLP/JSON messages are objects: serde would also read one from an array, by position;
/// the bound refuses that.
#[test]
fn a_message_given_as_an_array_is_refused() {
    let body = br#"{"resourceSpans":[[null,[]]]}"#;
    let refused = bound_traces(Format::Json, body).unwrap_err();
    assert_eq!(refused.status, 400);
    assert!(refused.message.contains("array"), "{}", refused.message);
}

/// Truncations and corruptions: the bound never panics, answers 400 for what it cannot
/// read, and whenever prost decodes a body the bound reads it too, at least as large.
#[test]
fn corrupted_bodies_never_panic_and_what_decodes_is_bounded() {
    let request = traces_of((0..3).map(rich_span).collect());
    let bytes = prost::Message::encode_to_vec(&request);
    let json = serde_json::to_vec(&request).unwrap();
    let metrics_bytes = prost::Message::encode_to_vec(&every_metric());
    let mut seed = 0x2545_F491_4F6C_DD1Du64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let mut checked = 0;
    for (format, body) in [(Format::Protobuf, &bytes), (Format::Json, &json)] {
        let mut bodies: Vec<Vec<u8>> = (0..body.len()).map(|cut| body[..cut].to_vec()).collect();
        for _ in 0..3000 {
            let mut noisy = body.clone();
            for _ in 0..1 + next() % 4 {
                let i = (next() as usize) % noisy.len();
                noisy[i] = next() as u8;
            }
            bodies.push(noisy);
        }
        for body in &bodies {
            let foreseen = bound_traces(format, body);
            if let Err(r) = &foreseen {
                assert_eq!(r.status, 400);
            }
            if let Ok(decoded) = decode::traces(format, body) {
                let foreseen = foreseen.unwrap_or_else(|r| {
                    panic!("{format:?}: prost decodes what the bound refuses: {r:?}")
                });
                assert!(foreseen >= size::traces(&decoded));
                checked += 1;
            }
        }
    }
    for _ in 0..3000 {
        let mut noisy = metrics_bytes.clone();
        for _ in 0..1 + next() % 4 {
            let i = (next() as usize) % noisy.len();
            noisy[i] = next() as u8;
        }
        if let Ok(decoded) = decode::metrics(Format::Protobuf, &noisy) {
            let foreseen = bound_metrics(Format::Protobuf, &noisy).expect("what prost decodes");
            assert!(foreseen >= size::metrics(&decoded));
            checked += 1;
        }
    }
    assert!(checked > 500, "only {checked} bodies decoded");
}

//! The walk's own limits: every message fits its per-message counts, and a walk given a cap
//! stops as soon as it is over, before the rest of the body is read.

use super::*;

/// Every message the bound reads fits its per-message counts.
#[test]
fn every_message_fits_the_counts() {
    let mut seen: Vec<*const schema::Message> = Vec::new();
    let mut todo = vec![&schema::TRACES, &schema::METRICS];
    while let Some(message) = todo.pop() {
        if seen.contains(&(message as *const _)) {
            continue;
        }
        seen.push(message);
        assert!(message.fields.len() <= schema::MAX_FIELDS);
        for field in message.fields {
            if let Kind::Message(m) | Kind::Messages(m) = field.kind {
                todo.push(m);
            }
        }
    }
    assert!(seen.len() > 25, "{} messages", seen.len());
}

/// A walk given a cap stops once over it: 16 MiB of empty spans, 2 GiB decoded, are found
/// over a 256 MiB cap in either format, before the rest is read.
#[test]
fn a_walk_stops_over_its_cap() {
    let cap = 256 << 20;
    let spans = (16 << 20) / 2 - 8;
    let body = field(1, &field(2, &[0x12, 0x00].repeat(spans)));
    match traces(Format::Protobuf, &body, cap) {
        Ok(Foreseen::Over(bytes)) => assert!(bytes > cap),
        other => panic!("{other:?}"),
    }
    let json = format!(
        "{{\"resourceSpans\":[{{\"scopeSpans\":[{{\"spans\":[{}{{}}]}}]}}]}}",
        "{},".repeat(spans / 2)
    );
    match traces(Format::Json, json.as_bytes(), cap) {
        Ok(Foreseen::Over(bytes)) => assert!(bytes > cap),
        other => panic!("{other:?}"),
    }
    // Under the cap, the whole figure.
    let small = field(1, &field(2, &[0x12, 0x00].repeat(1000)));
    assert!(matches!(
        traces(Format::Protobuf, &small, cap),
        Ok(Foreseen::AtMost(_))
    ));
}

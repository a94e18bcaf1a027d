//! The scan reads what serde_json reads, or gives the line up: on gpuspan's own lines and on
//! every line one byte away from them.

use gpuspan::runlog::SpanRecord;

use super::{request, GiveUp};
use crate::diff::wire::{Request, ResourceSpans};

/// What a line reads as: each resource's rank and spans, written out (a NaN read is equal
/// to a NaN read).
type Read = String;

fn flat(resources: Vec<ResourceSpans>) -> Read {
    let read: Vec<(Option<String>, Vec<SpanRecord>)> = resources
        .into_iter()
        .map(|r| (r.rank.clone(), r.into_spans().collect()))
        .collect();
    format!("{read:#?}")
}

fn by_serde(line: &str) -> Result<Read, serde_json::Error> {
    serde_json::from_str::<Request>(line).map(|r| flat(r.resource_spans))
}

fn by_scan(line: &str) -> Result<Read, GiveUp> {
    let mut spans = Vec::new();
    let resources = request(line, &mut spans)?;
    let mut spans = spans.into_iter();
    let read: Vec<(Option<String>, Vec<SpanRecord>)> = resources
        .into_iter()
        .map(|(rank, count)| (rank, spans.by_ref().take(count).collect()))
        .collect();
    Ok(format!("{read:#?}"))
}

/// A step of one device as gpuspan writes it, with the fields a comparison skips.
const STEP: &str = r#"{"traceId":"0000000000000000000000000000abcd","spanId":"0000000000000002","traceState":"","parentSpanId":"0000000000000001","flags":257,"name":"step","kind":1,"startTimeUnixNano":"1800000000000000000","endTimeUnixNano":"1800000000090000000","attributes":[{"key":"code.file.path","value":{"stringValue":"examples/train.rs"}},{"key":"code.line.number","value":{"intValue":"237"}},{"key":"ml.step","value":{"intValue":"3"}},{"key":"batch_size","value":{"intValue":"256"}},{"key":"gpu.memory.start","value":{"intValue":"21474836480"}},{"key":"gpu.memory.end","value":{"intValue":"21474836480"}},{"key":"gpu.memory.peak","value":{"intValue":"32212254720"}},{"key":"gpu.memory.source","value":{"stringValue":"nvml"}},{"key":"gpu.0.memory.peak","value":{"intValue":"32212254720"}},{"key":"gpu.energy","value":{"doubleValue":12.345678901234567}},{"key":"gpu.0.energy","value":{"doubleValue":"NaN"}},{"key":"gpu.energy.estimated","value":{"boolValue":true}},{"key":"gpu.throttle.reasons","value":{"arrayValue":{"values":[{"stringValue":"power_cap"}]}}}],"droppedAttributesCount":0,"events":[{"timeUnixNano":"1800000000010000000","name":"gpu.throttled","attributes":[]}],"droppedEventsCount":0,"links":[],"droppedLinksCount":0,"status":{"message":"","code":0}}"#;

/// An epoch that failed, its times as numbers and its attributes given value first.
const EPOCH: &str = r#"{"name":"epoch","spanId":"0000000000000001","traceId":"0000000000000000000000000000abcd","startTimeUnixNano":1800000000000000000,"endTimeUnixNano":1800000000900000000,"attributes":[{"value":{"intValue":7},"key":"ml.epoch"},{"key":"gpu.memory.start","value":{"intValue":-5}},{"key":"gpu.memory.peak","value":{"intValue":"2147483648","stringValue":"x"}},{"key":"gpu.memory.end","value":{"intValue":"1e3"}},{"key":"ml.rank","value":{}}],"status":{"code":2,"message":"CUDA out of memory"}}"#;

fn line(spans: &[&str]) -> String {
    format!(
        r#"{{"resourceSpans":[{{"resource":{{"attributes":[{{"key":"service.name","value":{{"stringValue":"train"}}}},{{"key":"ml.rank","value":{{"intValue":"1"}}}}],"droppedAttributesCount":0}},"scopeSpans":[{{"scope":{{"name":"gpuspan","version":""}},"spans":[{}]}}],"schemaUrl":""}}]}}"#,
        spans.join(",")
    )
}

#[test]
fn gpuspan_s_own_lines_are_scanned_to_what_serde_json_reads() {
    for text in [
        line(&[STEP, EPOCH]),
        line(&[]),
        format!(" {}\n", line(&[EPOCH])),
        r#"{"resourceSpans":[{"scopeSpans":[{"spans":[]}]},{"resource":{}}]}"#.to_owned(),
        "{}".to_owned(),
    ] {
        let scanned = by_scan(&text).unwrap_or_else(|_| panic!("gave up on {text}"));
        assert_eq!(scanned, by_serde(&text).unwrap(), "{text}");
    }
    let mut spans = vec![];
    let read = request(&line(&[STEP, EPOCH]), &mut spans).unwrap();
    assert_eq!(read, [(Some("1".to_owned()), 2)]);
    let (step, epoch) = (&spans[0], &spans[1]);
    assert_eq!(step.gpu.map(|m| m.peak), Some(30 << 30));
    assert_eq!(step.energy.joules, Some(12.345678901234567));
    assert_eq!(epoch.error.as_deref(), Some("CUDA out of memory"));
    assert_eq!(epoch.gpu, None, "an end of 1e3 is no integer");
}

#[test]
fn what_the_scan_is_not_sure_of_is_left_to_serde_json() {
    for text in [
        // An escape in a string read, a null, a field given twice, -0, a float time.
        line(&[&STEP.replace(r#""name":"step""#, r#""name":"st\u0065p""#)]),
        line(&[&STEP.replace(r#""status":{"message":"","code":0}"#, r#""status":null"#)]),
        line(&[&STEP.replace(r#""name":"step""#, r#""name":"step","name":"epoch""#)]),
        line(&[&EPOCH.replace(r#""intValue":-5"#, r#""intValue":-0"#)]),
        line(&[&EPOCH.replace("1800000000900000000,", "1.8e18,")]),
        line(&[&EPOCH.replace(r#""code":2"#, r#""code":99999999999"#)]),
        r#"{"resourceSpans":[],"resourceSpans":[]}"#.to_owned(),
    ] {
        assert!(by_scan(&text).is_err(), "{text}");
        let _ = by_serde(&text);
    }
}

#[test]
fn every_line_one_byte_away_is_read_the_same_or_left_to_serde_json() {
    let text = line(&[STEP, EPOCH]);
    let mut kept = vec![];
    request(&line(&[EPOCH]), &mut kept).unwrap();
    let bytes = text.as_bytes();
    let (mut scanned, mut refused) = (0, 0);
    for at in 0..bytes.len() {
        let mut variants = vec![[&bytes[..at], &bytes[at + 1..]].concat()];
        for byte in *b"\"\\{}[],:0-.eEn \x01x9" {
            variants.push([&bytes[..at], &[byte], &bytes[at + 1..]].concat());
            variants.push([&bytes[..at], &[byte], &bytes[at..]].concat());
        }
        for variant in variants {
            let Ok(variant) = String::from_utf8(variant) else {
                continue;
            };
            // A line given up leaves the spans read before it as they were.
            if request(&variant, &mut kept).is_ok() {
                kept.truncate(1);
            }
            assert_eq!(kept.len(), 1, "{variant}");
            match (by_scan(&variant), by_serde(&variant)) {
                (Ok(scan), Ok(serde)) => {
                    assert_eq!(scan, serde, "{variant}");
                    scanned += 1;
                }
                (Ok(_), Err(e)) => panic!("scanned a line serde_json refuses ({e}): {variant}"),
                (Err(GiveUp), Err(_)) => refused += 1,
                (Err(GiveUp), Ok(_)) => {}
            }
        }
    }
    assert!(scanned > 1_000 && refused > 1_000, "{scanned} {refused}");
}

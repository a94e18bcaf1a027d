//! `gpuspan report` reads whatever a `traces.jsonl` holds (a run killed mid-write, a file
//! edited by hand, another program's output, bytes that are not text) without panicking: it
//! draws the table from the lines it can read and names every line it skipped.

use std::io::Write;

use gpuspan::runlog::{read_run, TRACES_FILE};
use proptest::prelude::*;
use serde_json::{json, Value};

/// One line of the file and whether it is a well-formed OTLP/JSON request with one epoch
/// span (`Some(true)`), a well-formed one without (`Some(false)`), or anything (`None`).
#[derive(Debug, Clone)]
struct Line {
    bytes: Vec<u8>,
    well_formed_epoch: Option<bool>,
}

fn hex(len: usize) -> impl Strategy<Value = String> {
    prop::collection::vec(any::<u8>(), len)
        .prop_map(|bytes| bytes.iter().map(|b| format!("{b:02x}")).collect::<String>())
}

/// Any JSON value, nested a few levels, with keys that OTLP uses among others.
fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>().prop_map(Value::from),
        any::<String>().prop_map(Value::String),
        "[0-9a-f]{0,33}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::btree_map(
                prop_oneof![
                    Just("resourceSpans".to_owned()),
                    Just("scopeSpans".to_owned()),
                    Just("spans".to_owned()),
                    Just("name".to_owned()),
                    Just("attributes".to_owned()),
                    Just("key".to_owned()),
                    Just("value".to_owned()),
                    Just("intValue".to_owned()),
                    Just("spanId".to_owned()),
                    Just("status".to_owned()),
                    any::<String>(),
                ],
                inner,
                0..6,
            )
            .prop_map(|map| Value::Object(map.into_iter().collect())),
        ]
    })
}

/// An attribute value of any OTLP type, with integers of any size, sometimes as strings.
fn attribute_value() -> impl Strategy<Value = Value> {
    prop_oneof![
        any::<i64>().prop_map(|v| json!({ "intValue": v.to_string() })),
        any::<i64>().prop_map(|v| json!({ "intValue": v })),
        Just(json!({ "intValue": i64::MIN.to_string() })),
        Just(json!({ "intValue": i64::MAX.to_string() })),
        any::<f64>().prop_map(|v| json!({ "doubleValue": v })),
        any::<String>().prop_map(|v| json!({ "stringValue": v })),
        any::<bool>().prop_map(|v| json!({ "boolValue": v })),
        Just(json!({})),
    ]
}

/// A well-formed request with one span: an epoch, a step or another span, with any memory
/// attributes (missing, of the wrong type, out of range), any status and any timestamps.
fn otlp_line() -> impl Strategy<Value = Line> {
    let keys = prop::sample::subsequence(
        vec![
            "ml.epoch",
            "ml.step",
            "gpu.memory.start",
            "gpu.memory.peak",
            "gpu.memory.end",
            "gpu.process.memory.peak",
            "process.memory.start",
            "process.memory.peak",
            "process.memory.end",
            "gpu.memory.source",
        ],
        0..=10,
    );
    (
        prop::sample::select(vec!["epoch", "step", "train", ""]),
        hex(16),
        hex(8),
        prop_oneof![Just(String::new()), hex(8)],
        any::<u64>(),
        any::<u64>(),
        keys.prop_flat_map(|keys| {
            let n = keys.len();
            (Just(keys), prop::collection::vec(attribute_value(), n))
        }),
        (0i32..4, any::<String>()),
    )
        .prop_map(
            |(name, trace_id, span_id, parent, start, end, (keys, values), (code, message))| {
                let attributes: Vec<Value> = keys
                    .iter()
                    .zip(values)
                    .map(|(key, value)| json!({ "key": key, "value": value }))
                    .collect();
                let request = json!({
                    "resourceSpans": [{
                        "resource": { "attributes": [] },
                        "scopeSpans": [{
                            "scope": { "name": "gpuspan" },
                            "spans": [{
                                "traceId": trace_id,
                                "spanId": span_id,
                                "parentSpanId": parent,
                                "name": name,
                                "kind": 1,
                                "startTimeUnixNano": start.to_string(),
                                "endTimeUnixNano": end.to_string(),
                                "attributes": attributes,
                                "status": { "code": code, "message": message },
                            }],
                        }],
                    }],
                });
                Line {
                    bytes: request.to_string().into_bytes(),
                    well_formed_epoch: Some(name == "epoch"),
                }
            },
        )
}

fn any_line() -> impl Strategy<Value = Line> {
    let anything = |bytes: Vec<u8>| Line {
        // A line ends at a newline, so a generated one holds none.
        bytes: bytes.into_iter().filter(|b| *b != b'\n').collect(),
        well_formed_epoch: None,
    };
    prop_oneof![
        3 => otlp_line(),
        2 => otlp_line().prop_flat_map(|line| {
            // A run killed mid-write: the line stops anywhere.
            let len = line.bytes.len();
            (0..=len).prop_map(move |cut| Line {
                bytes: line.bytes[..cut].to_vec(),
                well_formed_epoch: (cut == len).then_some(line.well_formed_epoch).flatten(),
            })
        }),
        2 => any_json().prop_map(move |value| anything(value.to_string().into_bytes())),
        1 => any::<String>().prop_map(move |text| anything(text.into_bytes())),
        1 => prop::collection::vec(any::<u8>(), 0..80).prop_map(anything),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig {
        // Each case writes a file; the default 256 cases take a second or two.
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn any_traces_file_gives_a_table_and_names_the_lines_it_skipped(
        lines in prop::collection::vec(any_line(), 0..12),
        crlf in any::<bool>(),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let mut file = std::fs::File::create(dir.path().join(TRACES_FILE)).unwrap();
        for line in &lines {
            file.write_all(&line.bytes).unwrap();
            file.write_all(if crlf { b"\r\n" } else { b"\n" }).unwrap();
        }
        drop(file);

        let summary = read_run(dir.path());
        let summary = match summary {
            Ok(summary) => summary,
            Err(e) => return Err(TestCaseError::fail(format!("read_run failed: {e}"))),
        };
        let table = summary.render();
        prop_assert!(!table.is_empty());

        // Every skipped line is named by its number, and only lines that are not
        // well-formed requests are skipped.
        let skipped: Vec<usize> = summary
            .bad_lines
            .iter()
            .map(|bad| {
                bad.strip_prefix("line ")
                    .and_then(|rest| rest.split_once(": "))
                    .and_then(|(number, why)| (!why.is_empty()).then_some(number))
                    .and_then(|number| number.parse().ok())
                    .unwrap_or_else(|| panic!("a skipped line without its number: {bad}"))
            })
            .collect();
        for number in &skipped {
            prop_assert!((1..=lines.len()).contains(number), "line {number} of {}", lines.len());
            let line = &lines[number - 1];
            prop_assert!(line.well_formed_epoch.is_none(), "well-formed line {number} skipped: {:?}", summary.bad_lines);
            prop_assert!(table.contains(&format!("skipped unreadable line {number}:")), "{table}");
        }
        // A line that is not JSON text at all is always among them.
        for (i, line) in lines.iter().enumerate() {
            let text = std::str::from_utf8(&line.bytes).ok();
            let blank = text.is_some_and(|t| t.trim().is_empty());
            if !blank && text.and_then(|t| serde_json::from_str::<Value>(t).ok()).is_none() {
                prop_assert!(skipped.contains(&(i + 1)), "line {} not named: {:?}", i + 1, summary.bad_lines);
            }
        }
        // Every well-formed epoch span is a row.
        let epochs = lines.iter().filter(|l| l.well_formed_epoch == Some(true)).count();
        prop_assert!(summary.epochs.len() >= epochs, "{} rows for {epochs} epoch spans", summary.epochs.len());
    }
}

//! OTLP/JSON as a program without gRPC sends it to a collector's HTTP receiver, and spans
//! in OTLP/JSON as a run directory's `traces.jsonl` holds them, read back.

use std::net::SocketAddr;
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};

use crate::raw_http::{post, Reply};

/// Now, in nanoseconds since the Unix epoch.
pub fn unix_nanos() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("the clock is past 1970")
        .as_nanos() as u64
}

/// A request of one server span named `name`, from `start` to `end` (Unix nanoseconds), as
/// a service `inference` sends it.
pub fn one_span(name: &str, start: u64, end: u64) -> Value {
    json!({
        "resourceSpans": [{
            "resource": {"attributes": [
                {"key": "service.name", "value": {"stringValue": "inference"}}
            ]},
            "scopeSpans": [{"spans": [{
                "traceId": "5b8efff798038103d269b633813fc60c",
                "spanId": "eee19b7ec3c1b174",
                "name": name,
                "kind": 2,
                "startTimeUnixNano": start.to_string(),
                "endTimeUnixNano": end.to_string()
            }]}]
        }]
    })
}

/// Posts `request` to the OTLP/HTTP receiver at `addr` as JSON, and checks it was taken in
/// (HTTP 200).
pub fn send(addr: SocketAddr, request: &Value) -> Reply {
    let reply = post(
        addr,
        "/v1/traces",
        &[("Content-Type", "application/json")],
        request.to_string().as_bytes(),
    );
    assert_eq!(reply.status, 200, "{reply:?}");
    reply
}

/// The value of a span's attribute `key`, as OTLP/JSON writes it (`{"intValue": "3"}`).
pub fn attribute<'a>(span: &'a Value, key: &str) -> Option<&'a Value> {
    span["attributes"]
        .as_array()?
        .iter()
        .find(|kv| kv["key"] == key)
        .map(|kv| &kv["value"])
}

/// A span's integer attribute `key` (OTLP/JSON writes 64-bit integers as strings).
pub fn int(span: &Value, key: &str) -> Option<i64> {
    attribute(span, key)?["intValue"].as_str()?.parse().ok()
}

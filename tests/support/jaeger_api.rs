//! Reading spans back from Jaeger's query API (`GET /api/traces?service=...`, the JSON the
//! Jaeger UI reads), keeping each tag's type so a test can tell an integer from a string.

use std::collections::BTreeMap;
use std::net::SocketAddr;

use serde_json::Value;

use crate::http::{encode, get};

/// A span as Jaeger returns it.
#[derive(Debug, Clone)]
pub struct JaegerSpan {
    pub trace_id: String,
    pub span_id: String,
    /// The span of its `CHILD_OF` reference; empty for a root span.
    pub parent_span_id: String,
    pub operation: String,
    /// The service (the OTLP resource's `service.name`).
    pub service: String,
    /// Span tags: key to (`type`, `value`), e.g. `("int64", 3145728000)`.
    pub tags: BTreeMap<String, (String, Value)>,
    /// The process's (the OTLP resource's) other attributes, the same way.
    pub process_tags: BTreeMap<String, (String, Value)>,
}

impl JaegerSpan {
    /// The value of tag `key` if Jaeger holds it as an `int64`; `None` if absent or of
    /// another type (a string that holds digits is not an integer).
    pub fn int_tag(&self, key: &str) -> Option<i64> {
        int_of(self.tags.get(key)?)
    }

    /// The value of the process tag `key` if Jaeger holds it as an `int64`.
    pub fn process_int(&self, key: &str) -> Option<i64> {
        int_of(self.process_tags.get(key)?)
    }

    /// The value of the process tag `key` if it is a string.
    pub fn process_str(&self, key: &str) -> Option<&str> {
        match self.process_tags.get(key)? {
            (kind, Value::String(s)) if kind == "string" => Some(s),
            _ => None,
        }
    }
}

fn int_of((kind, value): &(String, Value)) -> Option<i64> {
    (kind == "int64").then(|| value.as_i64()).flatten()
}

/// Every span of `service` that Jaeger holds, or a description of what went wrong.
pub fn spans(query: SocketAddr, service: &str) -> Result<Vec<JaegerSpan>, String> {
    let path = format!("/api/traces?service={}&limit=100000", encode(service));
    let response = get(query, &path).map_err(|e| format!("GET {path}: {e}"))?;
    if response.status != 200 {
        return Err(format!("GET {path}: {} {}", response.status, response.body));
    }
    let body: Value = serde_json::from_str(&response.body).map_err(|e| format!("{path}: {e}"))?;
    let mut spans = Vec::new();
    for trace in body["data"].as_array().into_iter().flatten() {
        let processes = &trace["processes"];
        for span in trace["spans"].as_array().into_iter().flatten() {
            let process = &processes[span["processID"].as_str().unwrap_or_default()];
            let parent_span_id = span["references"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|r| r["refType"] == "CHILD_OF")
                .and_then(|r| r["spanID"].as_str())
                .unwrap_or_default()
                .to_string();
            spans.push(JaegerSpan {
                trace_id: span["traceID"].as_str().unwrap_or_default().into(),
                span_id: span["spanID"].as_str().unwrap_or_default().into(),
                parent_span_id,
                operation: span["operationName"].as_str().unwrap_or_default().into(),
                service: process["serviceName"].as_str().unwrap_or_default().into(),
                tags: tags(&span["tags"]),
                process_tags: tags(&process["tags"]),
            });
        }
    }
    Ok(spans)
}

fn tags(list: &Value) -> BTreeMap<String, (String, Value)> {
    list.as_array()
        .into_iter()
        .flatten()
        .filter_map(|tag| {
            Some((
                tag["key"].as_str()?.to_string(),
                (tag["type"].as_str()?.to_string(), tag["value"].clone()),
            ))
        })
        .collect()
}

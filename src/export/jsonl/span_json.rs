//! Spans written straight to OTLP/JSON, without building the protobuf structs first.
//!
//! The run directory's writer is the export path a tight loop of short steps hits hardest.
//! Building `opentelemetry-proto` structs (a copy of every key and value) and then serde
//! on them cost several times what writing the same JSON directly does. The envelope
//! (resource and scope) still comes from `opentelemetry-proto`, once per scope, so the
//! output is the same document the proto path writes (a test compares the two).

use std::io::{self, Write};

use opentelemetry::trace::{SpanKind, Status};
use opentelemetry::{KeyValue, Value};
use opentelemetry_proto::tonic::common::v1::AnyValue;
use opentelemetry_sdk::trace::SpanData;

/// Writes one span as an OTLP/JSON `Span` object.
pub(super) fn write_span(out: &mut Vec<u8>, span: &SpanData) -> io::Result<()> {
    let context = &span.span_context;
    out.extend_from_slice(b"{\"traceId\":\"");
    hex(out, &context.trace_id().to_bytes());
    out.extend_from_slice(b"\",\"spanId\":\"");
    hex(out, &context.span_id().to_bytes());
    out.extend_from_slice(b"\",\"traceState\":");
    if *context.trace_state() == opentelemetry::trace::TraceState::NONE {
        out.extend_from_slice(b"\"\"");
    } else {
        string(out, &context.trace_state().header())?;
    }
    out.extend_from_slice(b",\"parentSpanId\":\"");
    if span.parent_span_id != opentelemetry::trace::SpanId::INVALID {
        hex(out, &span.parent_span_id.to_bytes());
    }
    out.extend_from_slice(b"\",\"flags\":");
    let flags = span_flags(
        span.parent_span_is_remote,
        u32::from(context.trace_flags().to_u8()),
    );
    number(out, flags);
    out.extend_from_slice(b",\"name\":");
    string(out, &span.name)?;
    out.extend_from_slice(b",\"kind\":");
    number(out, kind(&span.span_kind));
    out.extend_from_slice(b",\"startTimeUnixNano\":\"");
    number(out, crate::util::time::unix_nanos(span.start_time));
    out.extend_from_slice(b"\",\"endTimeUnixNano\":\"");
    number(out, crate::util::time::unix_nanos(span.end_time));
    out.extend_from_slice(b"\",\"attributes\":");
    attributes(out, &span.attributes)?;
    out.extend_from_slice(b",\"droppedAttributesCount\":");
    number(out, span.dropped_attributes_count);
    out.extend_from_slice(b",\"events\":[");
    for (i, event) in span.events.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        write!(
            out,
            "{{\"timeUnixNano\":\"{}\",\"name\":",
            crate::util::time::unix_nanos(event.timestamp)
        )?;
        string(out, &event.name)?;
        out.extend_from_slice(b",\"attributes\":");
        attributes(out, &event.attributes)?;
        write!(
            out,
            ",\"droppedAttributesCount\":{}}}",
            event.dropped_attributes_count
        )?;
    }
    out.extend_from_slice(b"],\"droppedEventsCount\":");
    number(out, span.events.dropped_count);
    out.extend_from_slice(b",\"links\":");
    if span.links.is_empty() {
        out.extend_from_slice(b"[]");
    } else {
        let links: Vec<opentelemetry_proto::tonic::trace::v1::span::Link> =
            span.links.iter().cloned().map(Into::into).collect();
        serde_json::to_writer(&mut *out, &links)?;
    }
    out.extend_from_slice(b",\"droppedLinksCount\":");
    number(out, span.links.dropped_count);
    out.extend_from_slice(b",\"status\":");
    let (code, message) = match &span.status {
        Status::Unset => (0, ""),
        Status::Ok => (1, ""),
        Status::Error { description } => (2, description.as_ref()),
    };
    out.extend_from_slice(b"{\"message\":");
    string(out, message)?;
    out.extend_from_slice(b",\"code\":");
    number(out, code);
    out.extend_from_slice(b"}}");
    Ok(())
}

/// OTLP span flags: the trace flags plus "whether the parent is remote is known" and, if
/// so, "it is".
fn span_flags(parent_is_remote: bool, base: u32) -> u32 {
    const HAS_IS_REMOTE: u32 = 0x100;
    const IS_REMOTE: u32 = 0x200;
    let mut flags = base | HAS_IS_REMOTE;
    if parent_is_remote {
        flags |= IS_REMOTE;
    }
    flags
}

fn kind(kind: &SpanKind) -> i32 {
    match kind {
        SpanKind::Internal => 1,
        SpanKind::Server => 2,
        SpanKind::Client => 3,
        SpanKind::Producer => 4,
        SpanKind::Consumer => 5,
    }
}

fn attributes(out: &mut Vec<u8>, attributes: &[KeyValue]) -> io::Result<()> {
    out.push(b'[');
    for (i, kv) in attributes.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(b"{\"key\":");
        string(out, kv.key.as_str())?;
        out.extend_from_slice(b",\"value\":");
        value(out, &kv.value)?;
        out.push(b'}');
    }
    out.push(b']');
    Ok(())
}

fn value(out: &mut Vec<u8>, value: &Value) -> io::Result<()> {
    match value {
        Value::I64(v) => {
            out.extend_from_slice(b"{\"intValue\":\"");
            number(out, *v);
            out.extend_from_slice(b"\"}");
            Ok(())
        }
        Value::Bool(v) => write!(out, "{{\"boolValue\":{v}}}"),
        Value::String(v) => {
            out.extend_from_slice(b"{\"stringValue\":");
            string(out, v.as_str())?;
            out.push(b'}');
            Ok(())
        }
        Value::F64(v) => {
            out.extend_from_slice(b"{\"doubleValue\":");
            serde_json::to_writer(&mut *out, v)?;
            out.push(b'}');
            Ok(())
        }
        // Rare: the protobuf struct's own serializer.
        Value::Array(_) | _ => {
            let any: AnyValue = value.clone().into();
            serde_json::to_writer(&mut *out, &any).map_err(io::Error::from)
        }
    }
}

fn string(out: &mut Vec<u8>, text: &str) -> io::Result<()> {
    // Keys and most values need no escape: copied as they are.
    if text.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\') {
        out.reserve(text.len() + 2);
        out.push(b'"');
        out.extend_from_slice(text.as_bytes());
        out.push(b'"');
        return Ok(());
    }
    serde_json::to_writer(&mut *out, text).map_err(io::Error::from)
}

fn number(out: &mut Vec<u8>, value: impl itoa::Integer) {
    out.extend_from_slice(itoa::Buffer::new().format(value).as_bytes());
}

fn hex(out: &mut Vec<u8>, bytes: &[u8]) {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    for &b in bytes {
        out.push(DIGITS[usize::from(b >> 4)]);
        out.push(DIGITS[usize::from(b & 0xf)]);
    }
}

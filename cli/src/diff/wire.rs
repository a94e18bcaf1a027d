//! A traces file's line read fast: only what a comparison uses (ids, name, times, status
//! and the `gpu.`, `ml.` and `batch_size` attributes), borrowed from the line where it can
//! be, everything else skipped unread. The span then goes through the one reader of span
//! attributes (`SpanRecord::from_otlp`), as a run directory's spans always do.

use std::borrow::Cow;

use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
use opentelemetry_proto::tonic::trace::v1::{status::StatusCode, Span, Status};
use serde::Deserialize;

use gpuspan::names::attribute;
use gpuspan::runlog::SpanRecord;

/// One export request, as OTLP/JSON writes it.
#[derive(Deserialize)]
pub(super) struct Request<'a> {
    #[serde(rename = "resourceSpans", default, borrow)]
    pub(super) resource_spans: Vec<ResourceSpans<'a>>,
}

#[derive(Deserialize)]
pub(super) struct ResourceSpans<'a> {
    #[serde(default, borrow)]
    resource: Option<Resource<'a>>,
    #[serde(rename = "scopeSpans", default, borrow)]
    pub(super) scope_spans: Vec<ScopeSpans<'a>>,
}

#[derive(Deserialize)]
struct Resource<'a> {
    #[serde(default, borrow)]
    attributes: Vec<Attribute<'a>>,
}

#[derive(Deserialize)]
pub(super) struct ScopeSpans<'a> {
    #[serde(default, borrow)]
    pub(super) spans: Vec<WireSpan<'a>>,
}

#[derive(Deserialize)]
pub(super) struct WireSpan<'a> {
    #[serde(rename = "traceId", default, borrow)]
    trace_id: Cow<'a, str>,
    #[serde(rename = "spanId", default, borrow)]
    span_id: Cow<'a, str>,
    #[serde(rename = "parentSpanId", default, borrow)]
    parent_span_id: Cow<'a, str>,
    #[serde(default, borrow)]
    name: Cow<'a, str>,
    #[serde(rename = "startTimeUnixNano", default)]
    start: Number,
    #[serde(rename = "endTimeUnixNano", default)]
    end: Number,
    #[serde(default, borrow)]
    attributes: Vec<Attribute<'a>>,
    #[serde(default, borrow)]
    status: Option<WireStatus<'a>>,
}

#[derive(Deserialize)]
struct WireStatus<'a> {
    #[serde(default)]
    code: i32,
    #[serde(default, borrow)]
    message: Cow<'a, str>,
}

#[derive(Deserialize)]
struct Attribute<'a> {
    #[serde(borrow)]
    key: Cow<'a, str>,
    #[serde(default, borrow)]
    value: Option<Value<'a>>,
}

#[derive(Deserialize)]
struct Value<'a> {
    #[serde(rename = "intValue", default)]
    int: Option<Number>,
    #[serde(rename = "stringValue", default, borrow)]
    string: Option<Cow<'a, str>>,
    /// `gpu.energy` and the other figures in joules or watts.
    #[serde(rename = "doubleValue", default)]
    double: Option<Double>,
}

/// A float as OTLP/JSON writes one: a number, or a string (`"NaN"`, `"Infinity"`).
#[derive(Clone, Copy)]
struct Double(Option<f64>);

impl<'de> Deserialize<'de> for Double {
    fn deserialize<D: serde::Deserializer<'de>>(input: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = Double;

            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a number, or a string of one")
            }

            fn visit_f64<E>(self, v: f64) -> Result<Double, E> {
                Ok(Double(Some(v)))
            }

            fn visit_i64<E>(self, v: i64) -> Result<Double, E> {
                Ok(Double(Some(v as f64)))
            }

            fn visit_u64<E>(self, v: u64) -> Result<Double, E> {
                Ok(Double(Some(v as f64)))
            }

            fn visit_str<E>(self, v: &str) -> Result<Double, E> {
                Ok(Double(v.parse().ok()))
            }
        }
        input.deserialize_any(Visitor)
    }
}

/// An integer as OTLP/JSON writes one: a string of digits, or a number.
#[derive(Default, Clone, Copy)]
struct Number(Option<i128>);

impl<'de> Deserialize<'de> for Number {
    fn deserialize<D: serde::Deserializer<'de>>(input: D) -> Result<Self, D::Error> {
        input.deserialize_any(NumberVisitor)
    }
}

/// Reads a number or a string of digits as it comes, without buffering the value.
struct NumberVisitor;

impl serde::de::Visitor<'_> for NumberVisitor {
    type Value = Number;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("an integer, or a string of one")
    }

    fn visit_i64<E>(self, v: i64) -> Result<Number, E> {
        Ok(Number(Some(i128::from(v))))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Number, E> {
        Ok(Number(Some(i128::from(v))))
    }

    fn visit_f64<E>(self, _: f64) -> Result<Number, E> {
        Ok(Number(None))
    }

    fn visit_str<E>(self, v: &str) -> Result<Number, E> {
        Ok(Number(v.parse().ok()))
    }

    fn visit_bool<E>(self, _: bool) -> Result<Number, E> {
        Ok(Number(None))
    }

    fn visit_unit<E>(self) -> Result<Number, E> {
        Ok(Number(None))
    }
}

impl ResourceSpans<'_> {
    /// The resource's `ml.rank`, if it names one.
    pub(super) fn rank(&self) -> Option<String> {
        let value = self
            .resource
            .as_ref()?
            .attributes
            .iter()
            .find(|a| a.key == attribute::ML_RANK)?
            .value
            .as_ref()?;
        match (&value.int, &value.string) {
            (Some(Number(Some(v))), _) => Some(v.to_string()),
            (_, Some(s)) => Some(s.to_string()),
            _ => None,
        }
    }
}

impl WireSpan<'_> {
    /// The span as gpuspan reads one back.
    pub(super) fn record(&self) -> SpanRecord {
        let attributes = self
            .attributes
            .iter()
            .filter(|a| {
                a.key.starts_with("gpu.")
                    || a.key.starts_with("ml.")
                    || a.key == attribute::BATCH_SIZE
            })
            .filter_map(|a| {
                let value = a.value.as_ref()?;
                let value = match (&value.int, &value.string, value.double) {
                    (Some(Number(Some(v))), _, _) => {
                        any_value::Value::IntValue(i64::try_from(*v).ok()?)
                    }
                    (_, Some(s), _) => any_value::Value::StringValue(s.to_string()),
                    (_, _, Some(Double(Some(v)))) => any_value::Value::DoubleValue(v),
                    _ => return None,
                };
                Some(KeyValue {
                    key: a.key.to_string(),
                    value: Some(AnyValue { value: Some(value) }),
                    ..KeyValue::default()
                })
            })
            .collect();
        let time = |n: Number| n.0.and_then(|v| u64::try_from(v).ok()).unwrap_or(0);
        let span = Span {
            trace_id: hex(&self.trace_id),
            span_id: hex(&self.span_id),
            parent_span_id: hex(&self.parent_span_id),
            name: self.name.to_string(),
            start_time_unix_nano: time(self.start),
            end_time_unix_nano: time(self.end),
            attributes,
            status: self.status.as_ref().map(|s| Status {
                code: if s.code == StatusCode::Error as i32 {
                    s.code
                } else {
                    0
                },
                message: s.message.to_string(),
            }),
            ..Span::default()
        };
        SpanRecord::from_otlp(&span)
    }
}

/// Hex text as bytes; text that is not hex reads as none (an id of the wrong length reads
/// as zeros, as the run directory's reader has it).
fn hex(text: &str) -> Vec<u8> {
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    };
    text.as_bytes()
        .chunks(2)
        .map(|pair| match pair {
            [high, low] => Some(digit(*high)? << 4 | digit(*low)?),
            _ => None,
        })
        .collect::<Option<Vec<u8>>>()
        .unwrap_or_default()
}

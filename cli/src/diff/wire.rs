//! A traces file's line read through serde_json: only what a comparison uses (ids, name,
//! times, status and the `gpu.`, `ml.` and `batch_size` attributes), borrowed from the line
//! where it can be, everything else skipped unread. Each span's attributes go straight into
//! the one reader of span attributes (`SpanReader`, the rules of `SpanRecord::from_otlp`)
//! as they are decoded, so no span is built twice and no attribute is copied.
//!
//! The lines gpuspan writes are read by the faster scan of `scan.rs`, which builds the same
//! records; this reader takes any line the scan leaves to it, and says what is wrong with a
//! line that is not an export request.

use std::borrow::Cow;
use std::fmt;

use opentelemetry_proto::tonic::trace::v1::status::StatusCode;
use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;

use gpuspan::names::attribute;
use gpuspan::runlog::{SpanReader, SpanRecord};

/// One export request, as OTLP/JSON writes it.
#[derive(Deserialize)]
pub(super) struct Request {
    #[serde(rename = "resourceSpans", default)]
    pub(super) resource_spans: Vec<ResourceSpans>,
}

/// One resource's spans, read.
#[derive(Deserialize)]
pub(super) struct ResourceSpans {
    /// The resource's `ml.rank`, if it names one.
    #[serde(rename = "resource", default, deserialize_with = "rank_of")]
    pub(super) rank: Option<String>,
    #[serde(rename = "scopeSpans", default)]
    pub(super) scope_spans: Vec<ScopeSpans>,
}

impl ResourceSpans {
    /// The spans of every scope, in the order read.
    pub(super) fn into_spans(self) -> impl Iterator<Item = SpanRecord> {
        self.scope_spans.into_iter().flat_map(|s| s.spans)
    }
}

#[derive(Deserialize)]
struct Resource<'a> {
    #[serde(default, borrow)]
    attributes: Vec<Attribute<'a>>,
}

/// One scope's spans, read.
#[derive(Deserialize)]
pub(super) struct ScopeSpans {
    #[serde(default, deserialize_with = "spans")]
    pub(super) spans: Vec<SpanRecord>,
}

#[derive(Deserialize)]
struct WireStatus<'a> {
    #[serde(default)]
    code: i32,
    #[serde(default, borrow)]
    message: Cow<'a, str>,
}

/// One attribute, read.
#[derive(Deserialize)]
pub(super) struct Attribute<'a> {
    #[serde(borrow)]
    pub(super) key: Cow<'a, str>,
    #[serde(default, borrow)]
    pub(super) value: Option<Value<'a>>,
}

/// An attribute's value, as far as a comparison reads one.
#[derive(Deserialize, Default)]
pub(super) struct Value<'a> {
    #[serde(rename = "intValue", default)]
    pub(super) int: Option<Number>,
    #[serde(rename = "stringValue", default, borrow)]
    pub(super) string: Option<Cow<'a, str>>,
    /// `gpu.energy` and the other figures in joules or watts.
    #[serde(rename = "doubleValue", default)]
    pub(super) double: Option<Double>,
}

/// A float as OTLP/JSON writes one: a number, or a string (`"NaN"`, `"Infinity"`).
#[derive(Clone, Copy)]
pub(super) struct Double(pub(super) Option<f64>);

impl<'de> Deserialize<'de> for Double {
    fn deserialize<D: Deserializer<'de>>(input: D) -> Result<Self, D::Error> {
        struct DoubleVisitor;
        impl Visitor<'_> for DoubleVisitor {
            type Value = Double;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
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
        input.deserialize_any(DoubleVisitor)
    }
}

/// Text borrowed from the line unless it holds escapes.
#[derive(Deserialize, Default)]
struct Text<'a>(#[serde(borrow)] Cow<'a, str>);

/// An integer as OTLP/JSON writes one: a string of digits, or a number.
#[derive(Default, Clone, Copy)]
pub(super) struct Number(pub(super) Option<i128>);

impl<'de> Deserialize<'de> for Number {
    fn deserialize<D: Deserializer<'de>>(input: D) -> Result<Self, D::Error> {
        input.deserialize_any(NumberVisitor)
    }
}

/// Reads a number or a string of digits as it comes, without buffering the value.
struct NumberVisitor;

impl Visitor<'_> for NumberVisitor {
    type Value = Number;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
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

/// The value an attribute is read as: an integer that fits, else its string, else its
/// float.
enum Read<'v> {
    Int(i64),
    Text(&'v str),
    Float(f64),
}

impl Value<'_> {
    fn read(&self) -> Option<Read<'_>> {
        match (&self.int, &self.string, self.double) {
            (Some(Number(Some(v))), _, _) => i64::try_from(*v).ok().map(Read::Int),
            (_, Some(s), _) => Some(Read::Text(s)),
            (_, _, Some(Double(Some(v)))) => Some(Read::Float(v)),
            _ => None,
        }
    }
}

/// The resource's `ml.rank`, if it names one.
fn rank_of<'de, D: Deserializer<'de>>(input: D) -> Result<Option<String>, D::Error> {
    let Some(resource) = Option::<Resource<'de>>::deserialize(input)? else {
        return Ok(None);
    };
    Ok(rank_in(&resource.attributes))
}

/// The `ml.rank` among a resource's attributes, if it names one.
pub(super) fn rank_in(attributes: &[Attribute<'_>]) -> Option<String> {
    let rank = attributes
        .iter()
        .find(|a| a.key == attribute::ML_RANK)
        .and_then(|a| a.value.as_ref());
    rank.and_then(|value| match (&value.int, &value.string) {
        (Some(Number(Some(v))), _) => Some(v.to_string()),
        (_, Some(s)) => Some(s.to_string()),
        _ => None,
    })
}

/// A scope's spans, each read into its record as it is decoded.
fn spans<'de, D: Deserializer<'de>>(input: D) -> Result<Vec<SpanRecord>, D::Error> {
    struct Spans;
    impl<'de> Visitor<'de> for Spans {
        type Value = Vec<SpanRecord>;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a sequence of spans")
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0));
            while let Some(WireSpan(record)) = seq.next_element()? {
                out.push(record);
            }
            Ok(out)
        }
    }
    input.deserialize_seq(Spans)
}

/// One span, read into its record.
struct WireSpan(SpanRecord);

/// The span fields a comparison reads; any other is skipped.
#[derive(Deserialize)]
#[serde(field_identifier)]
enum Field {
    #[serde(rename = "traceId")]
    TraceId,
    #[serde(rename = "spanId")]
    SpanId,
    #[serde(rename = "parentSpanId")]
    ParentSpanId,
    #[serde(rename = "name")]
    Name,
    #[serde(rename = "startTimeUnixNano")]
    Start,
    #[serde(rename = "endTimeUnixNano")]
    End,
    #[serde(rename = "attributes")]
    Attributes,
    #[serde(rename = "status")]
    Status,
    #[serde(other)]
    Other,
}

impl<'de> Deserialize<'de> for WireSpan {
    fn deserialize<D: Deserializer<'de>>(input: D) -> Result<Self, D::Error> {
        input.deserialize_map(SpanVisitor)
    }
}

struct SpanVisitor;

impl<'de> Visitor<'de> for SpanVisitor {
    type Value = WireSpan;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a span")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<WireSpan, A::Error> {
        let mut reader = SpanReader::default();
        let (mut trace_id, mut span_id, mut parent) =
            (Text::default(), Text::default(), Text::default());
        let mut name = Text::default();
        let (mut start, mut end) = (Number::default(), Number::default());
        let mut status: Option<WireStatus<'de>> = None;
        while let Some(field) = map.next_key::<Field>()? {
            match field {
                Field::TraceId => trace_id = map.next_value()?,
                Field::SpanId => span_id = map.next_value()?,
                Field::ParentSpanId => parent = map.next_value()?,
                Field::Name => name = map.next_value()?,
                Field::Start => start = map.next_value()?,
                Field::End => end = map.next_value()?,
                Field::Attributes => map.next_value_seed(Attributes(&mut reader))?,
                Field::Status => status = map.next_value()?,
                Field::Other => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        let status = status.as_ref().map(|s| (s.code, &*s.message));
        Ok(WireSpan(finish(
            reader,
            &name.0,
            (&trace_id.0, &span_id.0, &parent.0),
            (start, end),
            status,
        )))
    }
}

/// The record of a span whose attributes `reader` has read: its name, its trace, span and
/// parent ids as hex, its start and end, and its status's code and message.
pub(super) fn finish(
    reader: SpanReader,
    name: &str,
    (trace_id, span_id, parent): (&str, &str, &str),
    (start, end): (Number, Number),
    status: Option<(i32, &str)>,
) -> SpanRecord {
    let time = |n: Number| n.0.and_then(|v| u64::try_from(v).ok()).unwrap_or(0);
    let error = status
        .filter(|(code, _)| *code == StatusCode::Error as i32)
        .map(|(_, message)| message.to_owned());
    reader.finish(
        name.to_owned(),
        (
            id(trace_id).unwrap_or_default(),
            id(span_id).unwrap_or_default(),
            id(parent),
        ),
        (time(start), time(end)),
        error,
    )
}

/// A span's attributes, each handed to the reader as it is decoded: only the `gpu.`, `ml.`
/// and `batch_size` ones, as integers that fit or as strings.
struct Attributes<'r>(&'r mut SpanReader);

impl<'de> DeserializeSeed<'de> for Attributes<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, input: D) -> Result<(), D::Error> {
        input.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for Attributes<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a sequence")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while let Some(attribute) = seq.next_element::<Attribute<'de>>()? {
            offer(self.0, &attribute.key, attribute.value.as_ref());
        }
        Ok(())
    }
}

/// Whether a comparison reads the attribute `key`: the `gpu.`, `ml.` and `batch_size` ones.
pub(super) fn wanted(key: &str) -> bool {
    key.starts_with("gpu.") || key.starts_with("ml.") || key == attribute::BATCH_SIZE
}

/// Hands one attribute to the reader if a comparison reads it, as an integer that fits, else
/// as its string, else as its float.
pub(super) fn offer(reader: &mut SpanReader, key: &str, value: Option<&Value<'_>>) {
    if !wanted(key) {
        return;
    }
    match value.and_then(Value::read) {
        Some(Read::Int(v)) => reader.int(key, v),
        Some(Read::Text(s)) => reader.text(key, s),
        Some(Read::Float(v)) => reader.float(key, v),
        None => {}
    }
}

/// An id's hex text as its bytes: `None` unless it is `N` bytes of hex (an id of the wrong
/// length reads as zeros, and a parent as none, as the run directory's reader has it).
fn id<const N: usize>(text: &str) -> Option<[u8; N]> {
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    };
    let text = text.as_bytes();
    if text.len() != 2 * N {
        return None;
    }
    let mut out = [0; N];
    for (byte, pair) in out.iter_mut().zip(text.chunks_exact(2)) {
        *byte = digit(pair[0])? << 4 | digit(pair[1])?;
    }
    Some(out)
}

//! The OTLP trace and metrics requests as the bound reads them: for every message, the
//! size of its decoded struct and the fields that own memory (strings, bytes, vectors,
//! nested messages), with their protobuf tags and OTLP/JSON names. Fields that own nothing
//! (numbers, enums) are listed only where the JSON decoder treats them apart (a message
//! with a flattened `oneof`, see [`Message::flattened`]). Plain data.

use std::mem::size_of;

use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{
    AnyValue, ArrayValue, EntityRef, InstrumentationScope, KeyValue, KeyValueList,
};
use opentelemetry_proto::tonic::metrics::v1::{
    exponential_histogram_data_point, summary_data_point, Exemplar, ExponentialHistogram,
    ExponentialHistogramDataPoint, Gauge, Histogram, HistogramDataPoint, Metric, NumberDataPoint,
    ResourceMetrics, ScopeMetrics, Sum, Summary, SummaryDataPoint,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{span, ResourceSpans, ScopeSpans, Span, Status};

/// A message type.
#[derive(Debug)]
pub(crate) struct Message {
    /// Bytes of its decoded struct (held inline by its parent, or in a vector's slot).
    pub(crate) size: usize,
    /// The fields the bound reads; every other field is skipped.
    pub(crate) fields: &'static [Field],
    /// The position in `fields` of each protobuf tag ([`NONE`]: not read).
    by_tag: [u8; TAGS],
    /// Whether the JSON decoder reads it through a flattened `oneof`: it first copies every
    /// entry that is not one of its plain fields (the `oneof`'s and unknown ones) into a
    /// generic tree, then reads the `oneof` from that copy.
    pub(crate) flattened: bool,
}

/// A field of a message.
#[derive(Debug)]
pub(crate) struct Field {
    pub(crate) tag: u32,
    /// Its OTLP/JSON name.
    pub(crate) json: &'static str,
    pub(crate) kind: Kind,
    /// A member of the message's `oneof`.
    pub(crate) oneof: bool,
}

/// What a field holds once decoded.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Kind {
    /// Owns nothing (a number, a bool, an enum).
    Scalar,
    /// A string.
    Text,
    /// Bytes: ids as hex in JSON.
    Bytes,
    /// Bytes as base64 in JSON (`AnyValue.bytesValue`).
    Base64,
    /// One message, held inline (an optional field or a `oneof` member).
    Message(&'static Message),
    /// A vector of messages.
    Messages(&'static Message),
    /// A vector of strings.
    Texts,
    /// A vector of 8-byte numbers; `varint` when protobuf packs them as varints.
    Numbers { varint: bool },
}

const fn field(tag: u32, json: &'static str, kind: Kind) -> Field {
    Field {
        tag,
        json,
        kind,
        oneof: false,
    }
}

const fn oneof(tag: u32, json: &'static str, kind: Kind) -> Field {
    Field {
        tag,
        json,
        kind,
        oneof: true,
    }
}

/// Tags above the highest the schema reads are skipped.
const TAGS: usize = 16;
/// No field has this tag.
const NONE: u8 = u8::MAX;
/// The most fields a message lists (the bound keeps a count per field).
pub(crate) const MAX_FIELDS: usize = 12;

/// Where each tag's field is, built when compiling (a schema mistake does not compile).
const fn positions(fields: &[Field]) -> [u8; TAGS] {
    assert!(fields.len() <= MAX_FIELDS);
    let mut table = [NONE; TAGS];
    let mut i = 0;
    while i < fields.len() {
        let tag = fields[i].tag as usize;
        assert!(tag < TAGS && table[tag] == NONE);
        table[tag] = i as u8;
        i += 1;
    }
    table
}

const fn message<T>(fields: &'static [Field]) -> Message {
    Message {
        size: size_of::<T>(),
        fields,
        by_tag: positions(fields),
        flattened: false,
    }
}

const fn flattened<T>(fields: &'static [Field]) -> Message {
    Message {
        flattened: true,
        ..message::<T>(fields)
    }
}

use Kind::{Base64, Bytes, Messages, Numbers, Scalar, Text, Texts};

/// A message field.
const fn one(tag: u32, json: &'static str, m: &'static Message) -> Field {
    field(tag, json, Kind::Message(m))
}

// Common.

static ANY_VALUE: Message = flattened::<AnyValue>(&[
    oneof(1, "stringValue", Text),
    oneof(5, "arrayValue", Kind::Message(&ARRAY_VALUE)),
    oneof(6, "kvlistValue", Kind::Message(&KEY_VALUE_LIST)),
    oneof(7, "bytesValue", Base64),
]);
static ARRAY_VALUE: Message = message::<ArrayValue>(&[field(1, "values", Messages(&ANY_VALUE))]);
static KEY_VALUE_LIST: Message =
    message::<KeyValueList>(&[field(1, "values", Messages(&KEY_VALUE))]);
static KEY_VALUE: Message =
    message::<KeyValue>(&[field(1, "key", Text), one(2, "value", &ANY_VALUE)]);
static SCOPE: Message = message::<InstrumentationScope>(&[
    field(1, "name", Text),
    field(2, "version", Text),
    field(3, "attributes", Messages(&KEY_VALUE)),
]);
static ENTITY_REF: Message = message::<EntityRef>(&[
    field(1, "schemaUrl", Text),
    field(2, "type", Text),
    field(3, "idKeys", Texts),
    field(4, "descriptionKeys", Texts),
]);
static RESOURCE: Message = message::<Resource>(&[
    field(1, "attributes", Messages(&KEY_VALUE)),
    field(3, "entityRefs", Messages(&ENTITY_REF)),
]);

// Traces.

/// `ExportTraceServiceRequest`.
pub(crate) static TRACES: Message =
    message::<ExportTraceServiceRequest>(&[field(1, "resourceSpans", Messages(&RESOURCE_SPANS))]);
static RESOURCE_SPANS: Message = message::<ResourceSpans>(&[
    one(1, "resource", &RESOURCE),
    field(2, "scopeSpans", Messages(&SCOPE_SPANS)),
    field(3, "schemaUrl", Text),
]);
static SCOPE_SPANS: Message = message::<ScopeSpans>(&[
    one(1, "scope", &SCOPE),
    field(2, "spans", Messages(&SPAN)),
    field(3, "schemaUrl", Text),
]);
static SPAN: Message = message::<Span>(&[
    field(1, "traceId", Bytes),
    field(2, "spanId", Bytes),
    field(3, "traceState", Text),
    field(4, "parentSpanId", Bytes),
    field(5, "name", Text),
    field(9, "attributes", Messages(&KEY_VALUE)),
    field(11, "events", Messages(&EVENT)),
    field(13, "links", Messages(&LINK)),
    one(15, "status", &STATUS),
]);
static EVENT: Message = message::<span::Event>(&[
    field(2, "name", Text),
    field(3, "attributes", Messages(&KEY_VALUE)),
]);
static LINK: Message = message::<span::Link>(&[
    field(1, "traceId", Bytes),
    field(2, "spanId", Bytes),
    field(3, "traceState", Text),
    field(4, "attributes", Messages(&KEY_VALUE)),
]);
static STATUS: Message = message::<Status>(&[field(2, "message", Text)]);

// Metrics.

/// `ExportMetricsServiceRequest`.
pub(crate) static METRICS: Message = message::<ExportMetricsServiceRequest>(&[field(
    1,
    "resourceMetrics",
    Messages(&RESOURCE_METRICS),
)]);
static RESOURCE_METRICS: Message = message::<ResourceMetrics>(&[
    one(1, "resource", &RESOURCE),
    field(2, "scopeMetrics", Messages(&SCOPE_METRICS)),
    field(3, "schemaUrl", Text),
]);
static SCOPE_METRICS: Message = message::<ScopeMetrics>(&[
    one(1, "scope", &SCOPE),
    field(2, "metrics", Messages(&METRIC)),
    field(3, "schemaUrl", Text),
]);
static METRIC: Message = flattened::<Metric>(&[
    field(1, "name", Text),
    field(2, "description", Text),
    field(3, "unit", Text),
    field(12, "metadata", Messages(&KEY_VALUE)),
    oneof(5, "gauge", Kind::Message(&GAUGE)),
    oneof(7, "sum", Kind::Message(&SUM)),
    oneof(9, "histogram", Kind::Message(&HISTOGRAM)),
    oneof(
        10,
        "exponentialHistogram",
        Kind::Message(&EXPONENTIAL_HISTOGRAM),
    ),
    oneof(11, "summary", Kind::Message(&SUMMARY)),
]);
static GAUGE: Message = message::<Gauge>(&[field(1, "dataPoints", Messages(&NUMBER_POINT))]);
static SUM: Message = message::<Sum>(&[field(1, "dataPoints", Messages(&NUMBER_POINT))]);
static HISTOGRAM: Message =
    message::<Histogram>(&[field(1, "dataPoints", Messages(&HISTOGRAM_POINT))]);
static EXPONENTIAL_HISTOGRAM: Message =
    message::<ExponentialHistogram>(&[field(1, "dataPoints", Messages(&EXPONENTIAL_POINT))]);
static SUMMARY: Message = message::<Summary>(&[field(1, "dataPoints", Messages(&SUMMARY_POINT))]);
static NUMBER_POINT: Message = flattened::<NumberDataPoint>(&[
    field(7, "attributes", Messages(&KEY_VALUE)),
    field(2, "startTimeUnixNano", Scalar),
    field(3, "timeUnixNano", Scalar),
    field(5, "exemplars", Messages(&EXEMPLAR)),
    field(8, "flags", Scalar),
    oneof(4, "asDouble", Scalar),
    oneof(6, "asInt", Scalar),
]);
static HISTOGRAM_POINT: Message = message::<HistogramDataPoint>(&[
    field(9, "attributes", Messages(&KEY_VALUE)),
    field(6, "bucketCounts", Numbers { varint: false }),
    field(7, "explicitBounds", Numbers { varint: false }),
    field(8, "exemplars", Messages(&EXEMPLAR)),
]);
static EXPONENTIAL_POINT: Message = message::<ExponentialHistogramDataPoint>(&[
    field(1, "attributes", Messages(&KEY_VALUE)),
    one(8, "positive", &BUCKETS),
    one(9, "negative", &BUCKETS),
    field(11, "exemplars", Messages(&EXEMPLAR)),
]);
static BUCKETS: Message = message::<exponential_histogram_data_point::Buckets>(&[field(
    2,
    "bucketCounts",
    Numbers { varint: true },
)]);
static SUMMARY_POINT: Message = message::<SummaryDataPoint>(&[
    field(7, "attributes", Messages(&KEY_VALUE)),
    field(6, "quantileValues", Messages(&QUANTILE)),
]);
static QUANTILE: Message = message::<summary_data_point::ValueAtQuantile>(&[]);
static EXEMPLAR: Message = flattened::<Exemplar>(&[
    field(7, "filteredAttributes", Messages(&KEY_VALUE)),
    field(2, "timeUnixNano", Scalar),
    field(4, "spanId", Bytes),
    field(5, "traceId", Bytes),
    oneof(3, "asDouble", Scalar),
    oneof(6, "asInt", Scalar),
]);

impl Message {
    /// The field with protobuf tag `tag` and its position, if the bound reads it.
    pub(crate) fn by_tag(&self, tag: u32) -> Option<(usize, &'static Field)> {
        let position = *self.by_tag.get(usize::try_from(tag).ok()?)?;
        let field = self.fields.get(usize::from(position))?;
        Some((usize::from(position), field))
    }

    /// The field with OTLP/JSON name `name`, if the bound reads it.
    pub(crate) fn by_json(&self, name: &str) -> Option<&'static Field> {
        self.fields.iter().find(|f| f.json == name)
    }
}

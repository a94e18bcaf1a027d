//! What the receiver's query methods return: owned values that are easy to assert on.

use std::collections::BTreeMap;

use axum::http::HeaderMap;

use super::{AggregationTemporality, Signal, SpanKind, StatusCode};

/// An attribute value, reduced to the types tests assert on.
#[derive(Clone, Debug, PartialEq)]
pub enum AttrValue {
    Int(i64),
    Double(f64),
    Str(String),
    Bool(bool),
    /// An array of strings.
    Strs(Vec<String>),
    /// Other arrays, key-value lists, bytes, or no value at all.
    Other,
}

impl AttrValue {
    pub fn as_int(&self) -> Option<i64> {
        match self {
            AttrValue::Int(v) => Some(*v),
            _ => None,
        }
    }

    pub fn as_double(&self) -> Option<f64> {
        match self {
            AttrValue::Double(v) => Some(*v),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            AttrValue::Str(v) => Some(v),
            _ => None,
        }
    }

    pub fn as_strs(&self) -> Option<Vec<&str>> {
        match self {
            AttrValue::Strs(v) => Some(v.iter().map(String::as_str).collect()),
            _ => None,
        }
    }

    pub fn as_bool(&self) -> Option<bool> {
        match self {
            AttrValue::Bool(v) => Some(*v),
            _ => None,
        }
    }
}

/// Attributes by key. A key sent twice keeps its last value.
pub type Attributes = BTreeMap<String, AttrValue>;

/// Gives `$type` (which has an `attributes: Attributes` field) the typed
/// lookups `int_attr`, `double_attr`, `str_attr` and `bool_attr`. Each returns
/// `None` when the key is absent or holds a value of another type.
macro_rules! typed_attribute_lookups {
    ($type:ty) => {
        impl $type {
            pub fn int_attr(&self, key: &str) -> Option<i64> {
                self.attributes.get(key).and_then(AttrValue::as_int)
            }

            pub fn double_attr(&self, key: &str) -> Option<f64> {
                self.attributes.get(key).and_then(AttrValue::as_double)
            }

            pub fn str_attr(&self, key: &str) -> Option<&str> {
                self.attributes.get(key).and_then(AttrValue::as_str)
            }

            pub fn bool_attr(&self, key: &str) -> Option<bool> {
                self.attributes.get(key).and_then(AttrValue::as_bool)
            }

            pub fn strs_attr(&self, key: &str) -> Option<Vec<&str>> {
                self.attributes.get(key).and_then(AttrValue::as_strs)
            }
        }
    };
}

typed_attribute_lookups!(ReceivedSpan);
typed_attribute_lookups!(ReceivedEvent);
typed_attribute_lookups!(ReceivedPoint);

/// One span, with the resource and scope it was sent under.
#[derive(Clone, Debug, PartialEq)]
pub struct ReceivedSpan {
    pub name: String,
    /// Lower-case hex, 32 digits.
    pub trace_id: String,
    /// Lower-case hex, 16 digits.
    pub span_id: String,
    /// Lower-case hex, or empty for a root span.
    pub parent_span_id: String,
    pub start_time_unix_nano: u64,
    pub end_time_unix_nano: u64,
    pub kind: SpanKind,
    pub status_code: StatusCode,
    pub status_message: String,
    pub attributes: Attributes,
    pub events: Vec<ReceivedEvent>,
    pub resource_attributes: Attributes,
    pub scope_name: String,
}

impl ReceivedSpan {
    pub fn is_root(&self) -> bool {
        self.parent_span_id.is_empty()
    }

    /// Whether `self` is a direct child of `parent` (same trace, parent link).
    pub fn is_child_of(&self, parent: &ReceivedSpan) -> bool {
        self.trace_id == parent.trace_id && self.parent_span_id == parent.span_id
    }

    /// The `Str` value of resource attribute `key` (for example `service.name`).
    pub fn resource_str_attr(&self, key: &str) -> Option<&str> {
        self.resource_attributes
            .get(key)
            .and_then(AttrValue::as_str)
    }

    pub fn events_named(&self, name: &str) -> Vec<&ReceivedEvent> {
        self.events.iter().filter(|e| e.name == name).collect()
    }
}

/// One span event.
#[derive(Clone, Debug, PartialEq)]
pub struct ReceivedEvent {
    pub name: String,
    pub time_unix_nano: u64,
    pub attributes: Attributes,
}

/// The kind of metric a point belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MetricKind {
    Gauge,
    Sum {
        monotonic: bool,
    },
    Histogram,
    /// Exponential histograms and summaries; their points carry
    /// [`PointValue::Other`].
    Other,
}

/// The value of one data point.
#[derive(Clone, Debug, PartialEq)]
pub enum PointValue {
    Int(i64),
    Double(f64),
    Histogram {
        count: u64,
        sum: Option<f64>,
        min: Option<f64>,
        max: Option<f64>,
        bucket_counts: Vec<u64>,
        explicit_bounds: Vec<f64>,
    },
    /// A number point without a value, or a point of a [`MetricKind::Other`] metric.
    Other,
}

/// One metric data point, with its metric, resource and scope.
#[derive(Clone, Debug, PartialEq)]
pub struct ReceivedPoint {
    /// The metric's name.
    pub name: String,
    pub description: String,
    pub unit: String,
    pub kind: MetricKind,
    /// `None` for gauges (and [`MetricKind::Other`]).
    pub temporality: Option<AggregationTemporality>,
    pub attributes: Attributes,
    pub value: PointValue,
    pub start_time_unix_nano: u64,
    pub time_unix_nano: u64,
    pub resource_attributes: Attributes,
    pub scope_name: String,
}

impl ReceivedPoint {
    /// The value of an integer gauge or sum point.
    pub fn as_int(&self) -> Option<i64> {
        match self.value {
            PointValue::Int(v) => Some(v),
            _ => None,
        }
    }

    /// The value of a floating-point gauge or sum point.
    pub fn as_double(&self) -> Option<f64> {
        match self.value {
            PointValue::Double(v) => Some(v),
            _ => None,
        }
    }

    /// The count of a histogram point.
    pub fn count(&self) -> Option<u64> {
        match self.value {
            PointValue::Histogram { count, .. } => Some(count),
            _ => None,
        }
    }

    /// The `Str` value of resource attribute `key` (for example `service.name`).
    pub fn resource_str_attr(&self, key: &str) -> Option<&str> {
        self.resource_attributes
            .get(key)
            .and_then(AttrValue::as_str)
    }
}

/// The headers of one request. Names are lower case; for gRPC these are the
/// request metadata (custom metadata such as `x-api-key` included).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestHeaders {
    pub signal: Signal,
    entries: Vec<(String, String)>,
}

impl RequestHeaders {
    pub(super) fn from_http(signal: Signal, headers: &HeaderMap) -> RequestHeaders {
        let entries = headers
            .iter()
            .map(|(name, value)| {
                let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
                (name.as_str().to_owned(), value)
            })
            .collect();
        RequestHeaders { signal, entries }
    }

    /// The first value of header `name` (case-insensitive).
    pub fn get(&self, name: &str) -> Option<&str> {
        self.get_all(name).into_iter().next()
    }

    /// Every value of header `name` (case-insensitive), in order.
    pub fn get_all(&self, name: &str) -> Vec<&str> {
        self.entries
            .iter()
            .filter(|(key, _)| key.eq_ignore_ascii_case(name))
            .map(|(_, value)| value.as_str())
            .collect()
    }
}

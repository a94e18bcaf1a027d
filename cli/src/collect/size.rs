//! What a decoded OTLP request holds in memory, for the forward queue's byte bound.
//!
//! A decoded request is several times its protobuf size: every span, attribute and id is a
//! struct or an allocation of its own (spans as OpenTelemetry SDKs send them hold about 8
//! times their encoded bytes). Counting the encoded size would let the queue hold that much
//! more than its bound, so the figure is walked from the decoded request: each vector's and
//! string's capacity, plus [`ALLOCATION_OVERHEAD`] per allocation. Pure functions; no
//! threading.

use std::mem::size_of;

use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{
    any_value, AnyValue, EntityRef, InstrumentationScope, KeyValue,
};
use opentelemetry_proto::tonic::metrics::v1::{
    exponential_histogram_data_point, metric, summary_data_point, Exemplar,
    ExponentialHistogramDataPoint, HistogramDataPoint, Metric, NumberDataPoint, ResourceMetrics,
    ScopeMetrics, SummaryDataPoint,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{span, ResourceSpans, ScopeSpans, Span};

/// The allocator's bookkeeping and rounding per allocation (glibc: a 16-byte header, and
/// blocks in steps of 16 bytes).
pub(crate) const ALLOCATION_OVERHEAD: usize = 16;

/// Bytes the decoded trace request holds, itself included.
pub(crate) fn traces(request: &ExportTraceServiceRequest) -> usize {
    size_of::<ExportTraceServiceRequest>() + request.resource_spans.heap()
}

/// Bytes the decoded metrics request holds, itself included.
pub(crate) fn metrics(request: &ExportMetricsServiceRequest) -> usize {
    size_of::<ExportMetricsServiceRequest>() + request.resource_metrics.heap()
}

/// Heap bytes a vector of attributes owns, itself included (its capacity counts, hence a
/// `Vec`).
#[allow(clippy::ptr_arg)]
pub(crate) fn attributes(attributes: &Vec<KeyValue>) -> usize {
    attributes.heap()
}

/// Heap bytes a value owns (its own struct is counted by whoever holds it).
trait Heap {
    /// True for types that own no heap, so a vector of them is counted without a walk.
    const FLAT: bool = false;
    fn heap(&self) -> usize;
}

/// Bytes an allocation of `bytes` takes from the allocator (none for an empty one).
pub(crate) fn allocation(bytes: usize) -> usize {
    if bytes == 0 {
        0
    } else {
        bytes + ALLOCATION_OVERHEAD
    }
}

impl<T: Heap> Heap for Vec<T> {
    fn heap(&self) -> usize {
        let own = allocation(self.capacity() * size_of::<T>());
        if T::FLAT {
            own
        } else {
            own + self.iter().map(Heap::heap).sum::<usize>()
        }
    }
}

impl<T: Heap> Heap for Option<T> {
    fn heap(&self) -> usize {
        self.as_ref().map_or(0, Heap::heap)
    }
}

impl Heap for String {
    fn heap(&self) -> usize {
        allocation(self.capacity())
    }
}

/// Scalars own nothing on the heap; `Vec<u8>`, `Vec<u64>` and `Vec<f64>` count as their
/// capacity through the `Vec` rule.
macro_rules! owns_nothing {
    ($($t:ty),*) => {$(impl Heap for $t { const FLAT: bool = true; fn heap(&self) -> usize { 0 } })*};
}
owns_nothing!(u8, u64, f64, summary_data_point::ValueAtQuantile);

/// A struct's heap: the sum of its fields' heaps.
macro_rules! fields {
    ($($t:ty { $($field:ident),* })*) => {$(
        impl Heap for $t {
            fn heap(&self) -> usize {
                0 $(+ self.$field.heap())*
            }
        }
    )*};
}
fields! {
    ResourceSpans { resource, scope_spans, schema_url }
    ScopeSpans { scope, spans, schema_url }
    Span { trace_id, span_id, trace_state, parent_span_id, name, attributes, events, links, status }
    span::Event { name, attributes }
    span::Link { trace_id, span_id, trace_state, attributes }
    opentelemetry_proto::tonic::trace::v1::Status { message }
    Resource { attributes, entity_refs }
    EntityRef { schema_url, r#type, id_keys, description_keys }
    InstrumentationScope { name, version, attributes }
    KeyValue { key, value }
    AnyValue { value }
    ResourceMetrics { resource, scope_metrics, schema_url }
    ScopeMetrics { scope, metrics, schema_url }
    Metric { name, description, unit, metadata, data }
    NumberDataPoint { attributes, exemplars }
    HistogramDataPoint { attributes, bucket_counts, explicit_bounds, exemplars }
    ExponentialHistogramDataPoint { attributes, positive, negative, exemplars }
    exponential_histogram_data_point::Buckets { bucket_counts }
    SummaryDataPoint { attributes, quantile_values }
    Exemplar { filtered_attributes, span_id, trace_id }
}

impl Heap for any_value::Value {
    fn heap(&self) -> usize {
        match self {
            Self::StringValue(s) => s.heap(),
            Self::BytesValue(b) => b.heap(),
            Self::ArrayValue(a) => a.values.heap(),
            Self::KvlistValue(l) => l.values.heap(),
            _ => 0,
        }
    }
}

impl Heap for metric::Data {
    fn heap(&self) -> usize {
        match self {
            Self::Gauge(g) => g.data_points.heap(),
            Self::Sum(s) => s.data_points.heap(),
            Self::Histogram(h) => h.data_points.heap(),
            Self::ExponentialHistogram(h) => h.data_points.heap(),
            Self::Summary(s) => s.data_points.heap(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collect::testing::{request_of, step_span};

    fn kv(key: &str, value: any_value::Value) -> KeyValue {
        KeyValue {
            key: key.into(),
            value: Some(AnyValue { value: Some(value) }),
            ..Default::default()
        }
    }

    fn request(spans: usize, attributes: usize) -> ExportTraceServiceRequest {
        let span = Span {
            attributes: (0..attributes)
                .map(|i| kv("ml.step", any_value::Value::IntValue(i as i64)))
                .collect(),
            ..step_span()
        };
        request_of(vec![span; spans])
    }

    /// Each span's struct, ids, name and attributes are counted: the figure grows by at
    /// least a span's struct per span and a `KeyValue` per attribute, and is well above the
    /// encoded size for small fields.
    #[test]
    fn every_span_and_attribute_is_counted() {
        let one = traces(&request(1, 0));
        let hundred = traces(&request(100, 0));
        assert!(hundred - one >= 99 * (size_of::<Span>() + 3 * ALLOCATION_OVERHEAD + 28));
        let with_attributes = traces(&request(100, 10));
        assert!(with_attributes - hundred >= 100 * 10 * (size_of::<KeyValue>() + 7));
        let request = request(100, 10);
        assert!(traces(&request) > 4 * prost::Message::encoded_len(&request));
    }

    #[test]
    fn a_decoded_request_counts_its_capacity() {
        let bytes = prost::Message::encode_to_vec(&request(1000, 3));
        let decoded: ExportTraceServiceRequest = prost::Message::decode(&bytes[..]).unwrap();
        let spans = &decoded.resource_spans[0].scope_spans[0].spans;
        assert!(traces(&decoded) >= spans.capacity() * size_of::<Span>());
        assert!(metrics(&ExportMetricsServiceRequest::default()) > 0);
    }
}

//! The table of a span's memory attributes: one row per figure, with its key, how to read
//! it from [`SpanFigures`], and where it lands in a record read back. The macros declare
//! these keys as tracing fields, in this order, and [`SpanFigures::write`] writes
//! them as OTel attributes from the same rows.

use opentelemetry::Value;

use super::{int, SpanFigures, Triple};
use crate::names::attribute as attr;

/// A figure's value on the wire: byte counts are integers, ratios floats.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Number {
    /// A byte count or a count.
    Int(i64),
    /// A ratio.
    Float(f64),
}

impl Number {
    /// As an OTel attribute value.
    pub(crate) fn value(self) -> Value {
        match self {
            Self::Int(v) => Value::I64(v),
            Self::Float(v) => Value::F64(v),
        }
    }

    /// As a tracing field value.
    pub(crate) fn as_field(&self) -> &dyn tracing::field::Value {
        match self {
            Self::Int(v) => v,
            Self::Float(v) => v,
        }
    }
}

/// Where an integer attribute lands in a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Slot {
    GpuStart,
    GpuPeak,
    GpuEnd,
    ProcessStart,
    ProcessPeak,
    ProcessEnd,
    HostStart,
    HostPeak,
    HostEnd,
    AllocatedPeak,
    ReservedPeak,
    Samples,
    Epoch,
    Step,
}

/// One figure of one device (`gpu.<i>.memory.<figure>`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum DeviceFigure {
    Start,
    Peak,
    End,
}

impl DeviceFigure {
    /// In the order of [`device_keys`](super::device_keys): start, end, peak.
    pub(crate) const ALL: [Self; 3] = [Self::Start, Self::End, Self::Peak];
}

/// One row: a key, how to read its figure, and its place in a record read back (`None`:
/// the record does not keep it).
#[derive(Debug)]
pub(crate) struct Column {
    pub(crate) key: &'static str,
    pub(crate) read: fn(&SpanFigures) -> Option<Number>,
    pub(crate) slot: Option<Slot>,
}

const fn column(key: &'static str, read: fn(&SpanFigures) -> Option<Number>, slot: Slot) -> Column {
    Column {
        key,
        read,
        slot: Some(slot),
    }
}

fn bytes(value: Option<u64>) -> Option<Number> {
    value.map(|v| Number::Int(int(v)))
}
fn start(t: Triple) -> Option<Number> {
    bytes(t.start())
}
fn end(t: Triple) -> Option<Number> {
    bytes(t.end())
}
fn peak(t: Triple) -> Option<Number> {
    bytes(t.peak())
}

/// Every figure a memory span carries as a tracing field, in the macros' order.
#[rustfmt::skip]
pub(crate) const TRACED: [Column; 13] = [
    column(attr::GPU_MEMORY_START, |f| start(f.gpu), Slot::GpuStart),
    column(attr::GPU_MEMORY_END, |f| end(f.gpu), Slot::GpuEnd),
    column(attr::GPU_MEMORY_PEAK, |f| peak(f.gpu), Slot::GpuPeak),
    Column { key: attr::GPU_MEMORY_DELTA, read: |f| f.gpu.delta().map(Number::Int), slot: None },
    Column { key: attr::GPU_MEMORY_IMBALANCE, read: |f| f.imbalance().map(Number::Float), slot: None },
    column(attr::GPU_PROCESS_MEMORY_START, |f| start(f.process_gpu), Slot::ProcessStart),
    column(attr::GPU_PROCESS_MEMORY_END, |f| end(f.process_gpu), Slot::ProcessEnd),
    column(attr::GPU_PROCESS_MEMORY_PEAK, |f| peak(f.process_gpu), Slot::ProcessPeak),
    column(attr::GPU_ALLOCATOR_ALLOCATED_PEAK, |f| bytes(f.allocated_peak.get()), Slot::AllocatedPeak),
    column(attr::GPU_ALLOCATOR_RESERVED_PEAK, |f| bytes(f.reserved_peak.get()), Slot::ReservedPeak),
    column(attr::PROCESS_MEMORY_START, |f| start(f.host), Slot::HostStart),
    column(attr::PROCESS_MEMORY_END, |f| end(f.host), Slot::HostEnd),
    column(attr::PROCESS_MEMORY_PEAK, |f| peak(f.host), Slot::HostPeak),
];

#[cfg(test)]
mod tests {
    use super::TRACED;

    /// The macros spell their fields out (see `__memory_span!`): they must be the table's
    /// keys, in its order, or the guard would find no fields to record into.
    #[test]
    fn the_macros_declare_every_row_of_the_table_in_its_order() {
        let span = crate::__memory_span!("probe");
        let fields: Vec<&str> = span
            .span()
            .metadata()
            .map(|m| m.fields().iter().map(|f| f.name()).collect())
            .unwrap_or_default();
        let keys: Vec<&str> = TRACED.iter().map(|c| c.key).collect();
        assert_eq!(fields, keys);
    }
}

//! Reading a span back into a [`SpanRecord`], from what the exporter sees (an SDK
//! `SpanData` on the export thread) or from what the run directory holds (an OTLP/JSON
//! span), through the same rules, so a table printed at shutdown and one drawn later from
//! `traces.jsonl` cannot disagree. When a key appears twice, the first one counts (the
//! program's own value comes before gpuspan's); per-device figures, the last.

use opentelemetry_proto::tonic::common::v1::any_value::Value as ProtoValue;
use opentelemetry_proto::tonic::trace::v1::status::StatusCode;

use super::columns::{DeviceFigure, Slot, TRACED};
use crate::names::{attribute as attr, span as span_name};
use crate::record::{DeviceFigures, GpuId, Memory, Role, SpanRecord};
use crate::util::time::unix_nanos;

/// An attribute value, borrowed from either representation.
#[derive(Debug, Clone, Copy)]
enum Attr<'a> {
    Int(i64),
    Str(&'a str),
    Other,
}

/// The slot of an integer key, from the attribute table and the span's own indices.
fn slot_of(key: &str) -> Option<Slot> {
    if let Some(column) = TRACED.iter().find(|c| c.key == key) {
        return column.slot;
    }
    match key {
        attr::GPU_MEMORY_SAMPLES => Some(Slot::Samples),
        attr::ML_EPOCH => Some(Slot::Epoch),
        attr::ML_STEP => Some(Slot::Step),
        _ => None,
    }
}

/// A record being read, one attribute at a time.
#[derive(Debug)]
pub(crate) struct RecordBuilder {
    name: String,
    ids: ([u8; 16], [u8; 8], Option<[u8; 8]>),
    times: (u64, u64),
    /// The error status message, if the span failed.
    pub(crate) error: Option<String>,
    slots: [Option<i64>; 14],
    batch_size: Option<i64>,
    batch_size_unreadable: bool,
    source: Option<String>,
    devices: Vec<DeviceFigures>,
}

impl RecordBuilder {
    fn new(
        name: &str,
        ids: ([u8; 16], [u8; 8], Option<[u8; 8]>),
        times: (u64, u64),
        error: Option<String>,
    ) -> Self {
        Self {
            name: name.to_owned(),
            ids,
            times,
            error,
            slots: [None; 14],
            batch_size: None,
            batch_size_unreadable: false,
            source: None,
            devices: Vec::new(),
        }
    }

    /// Sets a slot unless an earlier attribute already did.
    pub(crate) fn offer(&mut self, slot: Slot, value: i64) {
        self.slots[slot as usize].get_or_insert(value);
    }

    /// Sets `gpu.memory.source` unless an earlier attribute already did.
    pub(crate) fn offer_source(&mut self, source: &str) {
        if self.source.is_none() {
            self.source = Some(source.to_owned());
        }
    }

    /// Sets one figure of device `id` (the last of several wins, as it always did).
    pub(crate) fn offer_device(&mut self, id: GpuId, figure: DeviceFigure, value: i64) {
        let position = match self.devices.iter().position(|d| d.id == id) {
            Some(position) => position,
            None => {
                self.devices.push(DeviceFigures {
                    id,
                    start: None,
                    peak: None,
                    end: None,
                });
                self.devices.len() - 1
            }
        };
        let device = &mut self.devices[position];
        let slot = match figure {
            DeviceFigure::Start => &mut device.start,
            DeviceFigure::Peak => &mut device.peak,
            DeviceFigure::End => &mut device.end,
        };
        *slot = Some(value);
    }

    /// Reads one attribute of the span's own.
    fn read(&mut self, key: &str, value: Attr<'_>) {
        if key == attr::BATCH_SIZE {
            // A string that is a whole number counts: other programs' spans, and runs
            // recorded before unsigned fields were exported as integers.
            let parsed = match value {
                Attr::Int(v) => Some(v),
                Attr::Str(s) => s.trim().parse::<i64>().ok(),
                Attr::Other => None,
            };
            match parsed {
                Some(v) => {
                    self.batch_size.get_or_insert(v);
                }
                None => self.batch_size_unreadable = true,
            }
            return;
        }
        match value {
            Attr::Int(v) => match slot_of(key) {
                Some(slot) => self.offer(slot, v),
                None => {
                    if let Some((id, figure)) = device_key(key) {
                        self.offer_device(id, figure, v);
                    }
                }
            },
            Attr::Str(s) if key == attr::GPU_MEMORY_SOURCE => self.offer_source(s),
            _ => {}
        }
    }

    /// The record.
    pub(crate) fn finish(mut self) -> SpanRecord {
        let slot = |s: Slot| self.slots[s as usize];
        let memory = |start: Slot, peak: Slot, end: Slot| {
            Some(Memory {
                start: slot(start)?,
                peak: slot(peak)?,
                end: slot(end)?,
            })
        };
        // By name, as the macros make them; an index missing (a span from another program
        // named the same) reads as -1, so the span still counts.
        let role = match self.name.as_str() {
            span_name::EPOCH => Role::Epoch(slot(Slot::Epoch).unwrap_or(-1)),
            span_name::STEP => Role::Step(slot(Slot::Step).unwrap_or(-1)),
            _ => Role::Other,
        };
        self.devices.sort_by_key(|d| d.id);
        SpanRecord {
            role,
            trace_id: self.ids.0,
            span_id: self.ids.1,
            parent_span_id: self.ids.2,
            start_unix_nanos: self.times.0,
            end_unix_nanos: self.times.1,
            gpu: memory(Slot::GpuStart, Slot::GpuPeak, Slot::GpuEnd),
            process_gpu: memory(Slot::ProcessStart, Slot::ProcessPeak, Slot::ProcessEnd),
            host: memory(Slot::HostStart, Slot::HostPeak, Slot::HostEnd),
            allocated_peak: slot(Slot::AllocatedPeak),
            reserved_peak: slot(Slot::ReservedPeak),
            samples: slot(Slot::Samples),
            batch_size: self.batch_size,
            batch_size_unreadable: self.batch_size_unreadable && self.batch_size.is_none(),
            devices: self.devices,
            source: self.source,
            error: self.error,
            name: self.name,
        }
    }

    /// Starts reading a span as the SDK hands it to an exporter.
    pub(crate) fn from_span_data(span: &opentelemetry_sdk::trace::SpanData) -> Self {
        use opentelemetry::trace::Status;
        use opentelemetry::Value;
        let parent = span.parent_span_id;
        let parent = (parent != opentelemetry::trace::SpanId::INVALID).then(|| parent.to_bytes());
        let error = match &span.status {
            Status::Error { description } => Some(description.to_string()),
            _ => None,
        };
        let mut record = Self::new(
            &span.name,
            (
                span.span_context.trace_id().to_bytes(),
                span.span_context.span_id().to_bytes(),
                parent,
            ),
            (unix_nanos(span.start_time), unix_nanos(span.end_time)),
            error,
        );
        for kv in &span.attributes {
            let value = match &kv.value {
                Value::I64(v) => Attr::Int(*v),
                Value::String(s) => Attr::Str(s.as_str()),
                _ => Attr::Other,
            };
            record.read(kv.key.as_str(), value);
        }
        record
    }

    /// Starts reading a span from OTLP (as the run directory's `traces.jsonl` holds it).
    pub(crate) fn from_otlp(span: &opentelemetry_proto::tonic::trace::v1::Span) -> Self {
        let error = span
            .status
            .as_ref()
            .filter(|s| s.code == StatusCode::Error as i32)
            .map(|s| s.message.clone());
        let mut record = Self::new(
            &span.name,
            (
                fixed(&span.trace_id),
                fixed(&span.span_id),
                (span.parent_span_id.len() == 8).then(|| fixed(&span.parent_span_id)),
            ),
            (span.start_time_unix_nano, span.end_time_unix_nano),
            error,
        );
        for kv in &span.attributes {
            let value = match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                Some(ProtoValue::IntValue(v)) => Attr::Int(*v),
                Some(ProtoValue::StringValue(s)) => Attr::Str(s.as_str()),
                _ => Attr::Other,
            };
            record.read(kv.key.as_str(), value);
        }
        record
    }
}

impl SpanRecord {
    /// Reads a span as the SDK hands it to an exporter.
    #[cfg(test)]
    pub(crate) fn from_span_data(span: &opentelemetry_sdk::trace::SpanData) -> Self {
        RecordBuilder::from_span_data(span).finish()
    }

    /// Reads a span from OTLP (as the run directory's `traces.jsonl` holds it).
    pub fn from_otlp(span: &opentelemetry_proto::tonic::trace::v1::Span) -> Self {
        RecordBuilder::from_otlp(span).finish()
    }
}

/// `gpu.<id>.memory.<figure>` split into its device and figure.
fn device_key(key: &str) -> Option<(GpuId, DeviceFigure)> {
    let rest = key.strip_prefix(attr::GPU_DEVICE_PREFIX)?;
    let infix = rest.find(attr::GPU_DEVICE_MEMORY_INFIX)?;
    let id = rest[..infix].parse::<GpuId>().ok()?;
    let figure = match &rest[infix + attr::GPU_DEVICE_MEMORY_INFIX.len()..] {
        "start" => DeviceFigure::Start,
        "peak" => DeviceFigure::Peak,
        "end" => DeviceFigure::End,
        _ => return None,
    };
    Some((id, figure))
}

/// Copies an id of the expected length; a malformed one reads as zeros.
fn fixed<const N: usize>(bytes: &[u8]) -> [u8; N] {
    bytes.try_into().unwrap_or([0; N])
}

//! Reading a span back into a [`SpanRecord`], from what the exporter sees (an SDK
//! `SpanData` on the export thread) or from what the run directory holds (an OTLP/JSON
//! span), through the same rules, so a table printed at shutdown and one drawn later from
//! `traces.jsonl` cannot disagree. When a key appears twice, the first one counts (the
//! program's own value comes before gpuspan's); per-device figures, the last.

use opentelemetry_proto::tonic::common::v1::any_value::Value as ProtoValue;
use opentelemetry_proto::tonic::trace::v1::status::StatusCode;

use super::columns::{DeviceFigure, Slot, TRACED};
use crate::names::{attribute as attr, span as span_name};
use crate::record::{DeviceFigures, EnergyFigures, GpuId, Memory, Role, SpanRecord};
use crate::util::time::unix_nanos;

/// An attribute value, borrowed from either representation.
#[derive(Debug, Clone)]
pub(crate) enum Attr<'a> {
    Int(i64),
    Float(f64),
    Bool(bool),
    Str(&'a str),
    /// A string array (`gpu.throttle.reasons`).
    Strs(Vec<&'a str>),
    Other,
}

impl<'a> Attr<'a> {
    /// An OTel attribute value, as the export thread holds it.
    pub(crate) fn of_value(value: &'a opentelemetry::Value) -> Self {
        use opentelemetry::{Array, Value};
        match value {
            Value::I64(v) => Self::Int(*v),
            Value::F64(v) => Self::Float(*v),
            Value::Bool(v) => Self::Bool(*v),
            Value::String(s) => Self::Str(s.as_str()),
            Value::Array(Array::String(items)) => {
                Self::Strs(items.iter().map(|s| s.as_str()).collect())
            }
            _ => Self::Other,
        }
    }

    /// An OTLP attribute value, as a run directory holds it.
    fn of_proto(value: Option<&'a ProtoValue>) -> Self {
        match value {
            Some(ProtoValue::IntValue(v)) => Self::Int(*v),
            Some(ProtoValue::DoubleValue(v)) => Self::Float(*v),
            Some(ProtoValue::BoolValue(v)) => Self::Bool(*v),
            Some(ProtoValue::StringValue(s)) => Self::Str(s.as_str()),
            Some(ProtoValue::ArrayValue(array)) => Self::Strs(
                array
                    .values
                    .iter()
                    .filter_map(|v| match v.value.as_ref() {
                        Some(ProtoValue::StringValue(s)) => Some(s.as_str()),
                        _ => None,
                    })
                    .collect(),
            ),
            _ => Self::Other,
        }
    }
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
    energy: EnergyFigures,
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
            energy: EnergyFigures::default(),
        }
    }

    /// The span got a `gpu.throttled` event.
    pub(crate) fn mark_throttled(&mut self) {
        self.energy.throttled = true;
    }

    /// Reads the names of the span's events: a `gpu.throttled` among them marks it.
    fn events<'a>(&mut self, mut names: impl Iterator<Item = &'a str>) {
        if names.any(|name| name == crate::names::clock_event::THROTTLED) {
            self.mark_throttled();
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

    /// Reads one attribute: the span's own, or one of the energy attributes the export
    /// thread has just written (they are few, and read back here so that the record and
    /// the span cannot disagree).
    pub(crate) fn read(&mut self, key: &str, value: Attr<'_>) {
        if key.starts_with("gpu.") && self.read_energy(key, &value) {
            return;
        }
        if key == attr::BATCH_SIZE {
            // A string that is a whole number counts: other programs' spans, and runs
            // recorded before unsigned fields were exported as integers.
            let parsed = match value {
                Attr::Int(v) => Some(v),
                Attr::Str(s) => s.trim().parse::<i64>().ok(),
                _ => None,
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

    /// Reads an energy or clock attribute; whether `key` was one.
    fn read_energy(&mut self, key: &str, value: &Attr<'_>) -> bool {
        let energy = &mut self.energy;
        // Joules, watts and shares are finite and not negative: a NaN, an infinity or a
        // negative figure in a hand-written or damaged file is read as no figure, so no view
        // prints it nor sums it into a total.
        let float = match *value {
            Attr::Float(v) => Some(v),
            Attr::Int(v) => Some(v as f64),
            _ => None,
        }
        .filter(|v| v.is_finite() && *v >= 0.0);
        let share = float.filter(|v| *v <= 1.0);
        match key {
            attr::GPU_ENERGY => energy.joules = energy.joules.or(float),
            attr::GPU_POWER_AVG => energy.power_watts = energy.power_watts.or(float),
            attr::GPU_ENERGY_PER_SAMPLE => energy.per_sample = energy.per_sample.or(float),
            attr::GPU_THROTTLE_SHARE => energy.throttle_share = energy.throttle_share.or(share),
            attr::GPU_ENERGY_ESTIMATED => energy.estimated |= matches!(value, Attr::Bool(true)),
            attr::GPU_CLOCK_SM_MIN => {
                if let Attr::Int(v) = *value {
                    energy.sm_clock_min_mhz.get_or_insert(v);
                }
            }
            attr::GPU_ENERGY_SCOPE => {
                if let (Attr::Str(s), None) = (value, &energy.scope) {
                    energy.scope = Some((*s).to_owned());
                }
            }
            attr::GPU_THROTTLE_REASONS => {
                if let (Attr::Strs(names), true) = (value, energy.throttle_reasons.is_empty()) {
                    energy.throttle_reasons = names.iter().map(|n| (*n).to_owned()).collect();
                }
            }
            _ => {
                let Some(id) = key
                    .strip_prefix(attr::GPU_DEVICE_PREFIX)
                    .and_then(|rest| rest.strip_suffix(attr::GPU_DEVICE_ENERGY_SUFFIX))
                    .and_then(|id| id.parse::<GpuId>().ok())
                else {
                    return false;
                };
                if let Some(joules) = float {
                    match energy.devices.iter_mut().find(|(d, _)| *d == id) {
                        Some(device) => device.1 = joules,
                        None => energy.devices.push((id, joules)),
                    }
                }
            }
        }
        true
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
        self.energy.devices.sort_by_key(|d| d.0);
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
            energy: self.energy,
        }
    }

    /// Starts reading a span as the SDK hands it to an exporter.
    pub(crate) fn from_span_data(span: &opentelemetry_sdk::trace::SpanData) -> Self {
        use opentelemetry::trace::Status;
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
            record.read(kv.key.as_str(), Attr::of_value(&kv.value));
        }
        record.events(span.events.iter().map(|e| e.name.as_ref()));
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
            let value = Attr::of_proto(kv.value.as_ref().and_then(|v| v.value.as_ref()));
            record.read(kv.key.as_str(), value);
        }
        record.events(span.events.iter().map(|e| e.name.as_str()));
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

/// A span read one attribute at a time, as a streaming decoder of another format meets them,
/// through the same rules as [`SpanRecord::from_otlp`] without building the OTLP span first:
/// `gpuspan diff` reads a long run's file this way.
///
/// Give the attributes in the order the span holds them (the first of a repeated key counts,
/// as in [`SpanRecord::from_otlp`]), then the span's name, ids, times and error to
/// [`finish`](Self::finish).
#[derive(Debug)]
pub struct SpanReader(RecordBuilder);

impl Default for SpanReader {
    fn default() -> Self {
        Self(RecordBuilder::new(
            "",
            ([0; 16], [0; 8], None),
            (0, 0),
            None,
        ))
    }
}

impl SpanReader {
    /// An integer attribute (`intValue`).
    pub fn int(&mut self, key: &str, value: i64) {
        self.0.read(key, Attr::Int(value));
    }

    /// A floating-point attribute (`doubleValue`: energy, power).
    pub fn float(&mut self, key: &str, value: f64) {
        self.0.read(key, Attr::Float(value));
    }

    /// A string attribute (`stringValue`).
    pub fn text(&mut self, key: &str, value: &str) {
        self.0.read(key, Attr::Str(value));
    }

    /// The record: the span named `name`, with its trace, span and parent ids, its start and
    /// end in UNIX nanoseconds and the message of its error status, if it failed.
    pub fn finish(
        mut self,
        name: String,
        ids: ([u8; 16], [u8; 8], Option<[u8; 8]>),
        times: (u64, u64),
        error: Option<String>,
    ) -> SpanRecord {
        self.0.name = name;
        self.0.ids = ids;
        self.0.times = times;
        self.0.error = error;
        self.0.finish()
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

#[cfg(test)]
mod tests;

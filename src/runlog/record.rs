//! A closed span's memory, read back from its attributes: the one view of a span that the
//! summary table, `gpuspan report`, diagnosis and the pictures share.
//!
//! It is built from what the exporter sees (an SDK `SpanData` on the export thread) or from
//! what the run directory holds (an OTLP/JSON span), through the same attribute rules, so a
//! table printed at shutdown and one drawn later from `traces.jsonl` cannot disagree.

use opentelemetry_proto::tonic::common::v1::any_value::Value as ProtoValue;
use opentelemetry_proto::tonic::trace::v1::status::StatusCode;

use super::summary::Memory;

/// What kind of span this is, from its name and index attribute.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Role {
    /// An `epoch` span with its `ml.epoch` (-1 when it has none).
    Epoch(i64),
    /// A `step` span with its `ml.step` (-1 when it has none).
    Step(i64),
    /// Any other span.
    Other,
}

/// One device's figures on a span (`gpu.<i>.memory.*`), present with several devices.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceFigures {
    /// The device's NVML index.
    pub index: u32,
    /// At the span's start.
    pub start: Option<i64>,
    /// Highest while it was open.
    pub peak: Option<i64>,
    /// At its end (absent when the device was lost meanwhile).
    pub end: Option<i64>,
}

/// A closed span as gpuspan reads it.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct SpanRecord {
    /// The span's name (`epoch`, `step`, or a `memory_span!` name).
    pub name: String,
    /// Epoch, step or other.
    pub role: Role,
    /// Trace id.
    pub trace_id: [u8; 16],
    /// Span id.
    pub span_id: [u8; 8],
    /// Parent span id, if the span has a parent.
    pub parent_span_id: Option<[u8; 8]>,
    /// Start, UNIX nanoseconds.
    pub start_unix_nanos: u64,
    /// End, UNIX nanoseconds.
    pub end_unix_nanos: u64,
    /// `gpu.memory.start` / `.peak` / `.end`.
    pub gpu: Option<Memory>,
    /// `gpu.<i>.memory.*`, in device order.
    pub devices: Vec<DeviceFigures>,
    /// `gpu.process.memory.*`.
    pub process_gpu: Option<Memory>,
    /// `process.memory.*` (host resident memory).
    pub host: Option<Memory>,
    /// `gpu.allocator.allocated.peak`.
    pub allocated_peak: Option<i64>,
    /// `gpu.allocator.reserved.peak`.
    pub reserved_peak: Option<i64>,
    /// `batch_size`, when the span carries one: an integer, or a string that is one.
    pub batch_size: Option<i64>,
    /// The span carries a `batch_size` that is not a whole number (the fit leaves it out).
    pub(crate) batch_size_unreadable: bool,
    /// `gpu.memory.source`.
    pub source: Option<String>,
    /// `gpu.memory.samples`.
    pub samples: Option<i64>,
    /// The error status message, if the span failed.
    pub error: Option<String>,
}

/// An attribute value, borrowed from either representation.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Attr<'a> {
    Int(i64),
    Str(&'a str),
    Other,
}

impl SpanRecord {
    /// Seconds between start and end.
    pub fn seconds(&self) -> f64 {
        self.end_unix_nanos.saturating_sub(self.start_unix_nanos) as f64 / 1e9
    }

    /// Builds the record from a span's identity and its attributes, in one pass over them
    /// (this runs on the export thread for every span). When a key appears twice, the first
    /// one counts.
    pub(crate) fn from_attributes<'a>(
        name: &str,
        ids: ([u8; 16], [u8; 8], Option<[u8; 8]>),
        times: (u64, u64),
        error: Option<String>,
        attributes: impl Iterator<Item = (&'a str, Attr<'a>)>,
    ) -> Self {
        let mut gpu = Partial::default();
        let mut process_gpu = Partial::default();
        let mut host = Partial::default();
        let (mut epoch, mut step, mut batch_size, mut samples) = (None, None, None, None);
        let (mut allocated_peak, mut reserved_peak, mut source) = (None, None, None);
        let mut devices: Vec<DeviceFigures> = Vec::new();
        let mut batch_size_unreadable = false;
        for (key, value) in attributes {
            if key == "batch_size" {
                // A string that is a whole number counts: other programs' spans, and runs
                // recorded before unsigned fields were exported as integers.
                match value {
                    Attr::Int(v) => {
                        batch_size.get_or_insert(v);
                    }
                    Attr::Str(s) => match s.trim().parse::<i64>() {
                        Ok(v) => {
                            batch_size.get_or_insert(v);
                        }
                        Err(_) => batch_size_unreadable = true,
                    },
                    Attr::Other => batch_size_unreadable = true,
                }
                continue;
            }
            let v = match value {
                Attr::Int(v) => v,
                Attr::Str(s) if key == "gpu.memory.source" => {
                    source.get_or_insert_with(|| s.to_owned());
                    continue;
                }
                _ => continue,
            };
            let slot = match key {
                "gpu.memory.start" => &mut gpu.start,
                "gpu.memory.peak" => &mut gpu.peak,
                "gpu.memory.end" => &mut gpu.end,
                "gpu.process.memory.start" => &mut process_gpu.start,
                "gpu.process.memory.peak" => &mut process_gpu.peak,
                "gpu.process.memory.end" => &mut process_gpu.end,
                "process.memory.start" => &mut host.start,
                "process.memory.peak" => &mut host.peak,
                "process.memory.end" => &mut host.end,
                "gpu.allocator.allocated.peak" => &mut allocated_peak,
                "gpu.allocator.reserved.peak" => &mut reserved_peak,
                "gpu.memory.samples" => &mut samples,
                "ml.epoch" => &mut epoch,
                "ml.step" => &mut step,
                _ => {
                    if let Some((index, figure)) = device_key(key) {
                        device_figure(&mut devices, index, figure, v);
                    }
                    continue;
                }
            };
            slot.get_or_insert(v);
        }
        devices.sort_by_key(|d| d.index);
        // By name, as the macros make them; an index missing (a span from another program
        // named the same) reads as -1, so the span still counts.
        let role = match name {
            "epoch" => Role::Epoch(epoch.unwrap_or(-1)),
            "step" => Role::Step(step.unwrap_or(-1)),
            _ => Role::Other,
        };
        Self {
            name: name.to_owned(),
            role,
            trace_id: ids.0,
            span_id: ids.1,
            parent_span_id: ids.2,
            start_unix_nanos: times.0,
            end_unix_nanos: times.1,
            gpu: gpu.memory(),
            devices,
            process_gpu: process_gpu.memory(),
            host: host.memory(),
            allocated_peak,
            reserved_peak,
            batch_size,
            batch_size_unreadable: batch_size_unreadable && batch_size.is_none(),
            source,
            samples,
            error,
        }
    }

    /// Reads a span as the SDK hands it to an exporter.
    pub(crate) fn from_span_data(span: &opentelemetry_sdk::trace::SpanData) -> Self {
        use opentelemetry::trace::Status;
        use opentelemetry::Value;
        let parent = span.parent_span_id;
        let parent = (parent != opentelemetry::trace::SpanId::INVALID).then(|| parent.to_bytes());
        let error = match &span.status {
            Status::Error { description } => Some(description.to_string()),
            _ => None,
        };
        let attributes = span.attributes.iter().map(|kv| {
            let value = match &kv.value {
                Value::I64(v) => Attr::Int(*v),
                Value::String(s) => Attr::Str(s.as_str()),
                _ => Attr::Other,
            };
            (kv.key.as_str(), value)
        });
        Self::from_attributes(
            &span.name,
            (
                span.span_context.trace_id().to_bytes(),
                span.span_context.span_id().to_bytes(),
                parent,
            ),
            (unix_nanos(span.start_time), unix_nanos(span.end_time)),
            error,
            attributes,
        )
    }

    /// Reads a span from OTLP (as the run directory's `traces.jsonl` holds it).
    pub fn from_otlp(span: &opentelemetry_proto::tonic::trace::v1::Span) -> Self {
        let error = span
            .status
            .as_ref()
            .filter(|s| s.code == StatusCode::Error as i32)
            .map(|s| s.message.clone());
        let attributes = span.attributes.iter().map(|kv| {
            let value = match kv.value.as_ref().and_then(|v| v.value.as_ref()) {
                Some(ProtoValue::IntValue(v)) => Attr::Int(*v),
                Some(ProtoValue::StringValue(s)) => Attr::Str(s.as_str()),
                _ => Attr::Other,
            };
            (kv.key.as_str(), value)
        });
        Self::from_attributes(
            &span.name,
            (
                fixed(&span.trace_id),
                fixed(&span.span_id),
                (span.parent_span_id.len() == 8).then(|| fixed(&span.parent_span_id)),
            ),
            (span.start_time_unix_nano, span.end_time_unix_nano),
            error,
            attributes,
        )
    }
}

/// Start, peak and end as they are found; a `Memory` only with all three.
#[derive(Default)]
struct Partial {
    start: Option<i64>,
    peak: Option<i64>,
    end: Option<i64>,
}

impl Partial {
    fn memory(&self) -> Option<Memory> {
        Some(Memory {
            start: self.start?,
            peak: self.peak?,
            end: self.end?,
        })
    }
}

/// `gpu.<index>.memory.<figure>` split into its index and figure.
fn device_key(key: &str) -> Option<(u32, &str)> {
    let rest = key.strip_prefix("gpu.")?;
    let dot = rest.bytes().position(|b| b == b'.')?;
    let index = rest[..dot].parse::<u32>().ok()?;
    let figure = rest[dot + 1..].strip_prefix("memory.")?;
    Some((index, figure))
}

/// Sets one figure of device `index` (the last of several wins, as it always did).
pub(crate) fn device_figure(
    devices: &mut Vec<DeviceFigures>,
    index: u32,
    figure: &str,
    value: i64,
) {
    let position = match devices.iter().position(|d| d.index == index) {
        Some(position) => position,
        None => {
            devices.push(DeviceFigures {
                index,
                start: None,
                peak: None,
                end: None,
            });
            devices.len() - 1
        }
    };
    let device = &mut devices[position];
    match figure {
        "start" => device.start = Some(value),
        "peak" => device.peak = Some(value),
        "end" => device.end = Some(value),
        _ => {}
    }
}

/// Copies an id of the expected length; a malformed one reads as zeros.
fn fixed<const N: usize>(bytes: &[u8]) -> [u8; N] {
    bytes.try_into().unwrap_or([0; N])
}

/// Wall-clock time as UNIX nanoseconds (0 before 1970).
pub(crate) fn unix_nanos(time: std::time::SystemTime) -> u64 {
    time.duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

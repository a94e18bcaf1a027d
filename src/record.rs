//! A closed span as gpuspan reads it: the one view of a span that the summary table,
//! `gpuspan report`, diagnosis, the taps and the pictures share.
//!
//! Plain data with no imports: the ground floor. How a record is read from a span's
//! attributes lives with the attribute table (`figures`).

/// Start, peak and end of one memory figure over a span or an epoch, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Memory {
    /// At the start.
    pub start: i64,
    /// Highest while it was open.
    pub peak: i64,
    /// At its end.
    pub end: i64,
}

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

impl SpanRecord {
    /// Seconds between start and end.
    pub fn seconds(&self) -> f64 {
        self.end_unix_nanos.saturating_sub(self.start_unix_nanos) as f64 / 1e9
    }
}

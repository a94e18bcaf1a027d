//! The timeline file, `timeline.bin` in a run directory: every sample that changed a figure,
//! at full resolution, with wall-clock timestamps that line up with span times.
//!
//! # Format (version 1)
//! Integers are unsigned LEB128 varints; `zz` marks a zigzag-encoded signed varint; a string
//! is a varint byte length followed by UTF-8.
//!
//! ```text
//! header   magic "GPUSPANT" (8 bytes), version (1), origin (UNIX ns), interval (ns),
//!          device count n, then per device: id, uuid, name, where id is the GPU's NVML
//!          index, plus (MIG index + 1) << 32 for a MIG instance
//! series   S = 2n + 4 figures, in this order: used of each device, total of each device,
//!          this process's GPU memory, host RSS, allocator allocated, allocator reserved
//! records  until the end of the file, one per sample that changed at least one figure:
//!          dt     microseconds since the previous record (the first: since the origin)
//!          mask   ceil(S / 8) bytes; bit i (byte i / 8, bit i % 8) = series i changed
//!          then, per changed series in order, zz(stored - previous stored), where
//!          stored = 0 for "not read" and bytes + 1 otherwise; every series starts at 0
//! ```
//!
//! A sample that changed nothing costs nothing; one that moved one figure costs about four
//! bytes. A file cut short mid-record (a killed process) reads up to its last whole record.

use std::path::Path;

use integer_encoding::VarInt;

use crate::record::GpuId;

/// Name of the timeline file inside a run directory.
pub const TIMELINE_FILE: &str = "timeline.bin";

const MAGIC: &[u8; 8] = b"GPUSPANT";
const VERSION: u64 = 1;

/// A device as the timeline file names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimelineDevice {
    /// The GPU (NVML index) or MIG instance, as in `gpu.<id>.memory.*`.
    pub id: GpuId,
    /// `hw.id`, for NVIDIA the `GPU-...` (or `MIG-...`) UUID.
    pub uuid: String,
    /// The product name.
    pub name: String,
}

/// Which figure a series holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Figure {
    /// Memory used on the device at this position of [`Timeline::devices`].
    DeviceUsed(usize),
    /// Memory installed on that device.
    DeviceTotal(usize),
    /// This process's GPU memory, summed over the devices.
    ProcessGpu,
    /// Host resident memory of this process.
    HostRss,
    /// Allocator counter pushed by framework code: allocated.
    Allocated,
    /// Allocator counter pushed by framework code: reserved.
    Reserved,
}

/// One figure's changes: `(UNIX ns, value)`, `None` while it could not be read.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// What the series holds.
    pub figure: Figure,
    /// Every change, in time order.
    pub points: Vec<(u64, Option<u64>)>,
}

/// A timeline file read back.
#[derive(Debug, Clone, PartialEq)]
pub struct Timeline {
    /// UNIX ns the record times count from (when the writer started).
    pub origin_unix_nanos: u64,
    /// The sampler's interval, ns.
    pub interval_nanos: u64,
    /// The devices, in sampler order.
    pub devices: Vec<TimelineDevice>,
    /// Every figure's changes, in the file's series order.
    pub series: Vec<Series>,
    /// UNIX ns of the last record (the origin when there is none).
    pub last_unix_nanos: u64,
    /// Whether the file ended mid-record (the process was killed while writing).
    pub truncated: bool,
}

impl Timeline {
    /// The series of one figure, if the file has it.
    pub fn figure(&self, figure: Figure) -> Option<&Series> {
        self.series.iter().find(|s| s.figure == figure)
    }
}

/// Why a timeline file cannot be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TimelineError {
    /// The file could not be opened or read.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not a timeline of a version this build reads.
    #[error("{path} is not a gpuspan timeline file: {why}")]
    Format {
        /// The file.
        path: String,
        /// What was wrong.
        why: TimelineFormatError,
    },
}

/// What makes bytes not a timeline file this build reads.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TimelineFormatError {
    /// Another kind of file.
    #[error("it does not start with GPUSPANT")]
    Magic,
    /// A newer (or unknown) version of the format.
    #[error(
        "version {0}, and this build reads version {VERSION}: use a gpuspan as new as the one \
         that wrote it"
    )]
    Version(u64),
    /// The header ends before its last field.
    #[error("the header is cut short")]
    HeaderCut,
    /// The header's device count is beyond reason.
    #[error("it claims {0} devices")]
    Devices(u64),
}

/// The series of a file with `devices` devices, in file order.
pub(crate) fn figures(devices: usize) -> Vec<Figure> {
    let mut figures: Vec<Figure> = (0..devices).map(Figure::DeviceUsed).collect();
    figures.extend((0..devices).map(Figure::DeviceTotal));
    figures.extend([
        Figure::ProcessGpu,
        Figure::HostRss,
        Figure::Allocated,
        Figure::Reserved,
    ]);
    figures
}

/// Appends `value` as an LEB128 varint (a signed one zigzag-encoded).
fn put_varint(out: &mut Vec<u8>, value: impl VarInt) {
    let mut buffer = [0u8; 10];
    let length = value.encode_var(&mut buffer);
    out.extend_from_slice(&buffer[..length]);
}

fn put_string(out: &mut Vec<u8>, text: &str) {
    put_varint(out, text.len() as u64);
    out.extend_from_slice(text.as_bytes());
}

fn stored(value: Option<u64>) -> u64 {
    value.map_or(0, |v| v.saturating_add(1))
}

/// A device's id in the header: the NVML index in the low 32 bits, and above them the MIG
/// index plus one (0 for a whole GPU, so files from before MIG read the same).
fn encode_id(id: GpuId) -> u64 {
    let mig = id.mig.map_or(0, |m| u64::from(m) + 1);
    mig << 32 | u64::from(id.index)
}

fn decode_id(id: u64) -> GpuId {
    let index = (id & u64::from(u32::MAX)) as u32;
    match id >> 32 {
        0 => GpuId::gpu(index),
        mig => GpuId::mig(index, (mig - 1) as u32),
    }
}

/// The file's header.
pub(crate) fn header(
    origin_unix_nanos: u64,
    interval_nanos: u64,
    devices: &[TimelineDevice],
) -> Vec<u8> {
    let mut out = MAGIC.to_vec();
    put_varint(&mut out, VERSION);
    put_varint(&mut out, origin_unix_nanos);
    put_varint(&mut out, interval_nanos);
    put_varint(&mut out, devices.len() as u64);
    for device in devices {
        put_varint(&mut out, encode_id(device.id));
        put_string(&mut out, &device.uuid);
        put_string(&mut out, &device.name);
    }
    out
}

/// Turns samples into records, remembering what the file already holds.
#[derive(Debug)]
pub(crate) struct Encoder {
    origin_micros: u64,
    last_micros: u64,
    last: Vec<u64>,
}

impl Encoder {
    /// An encoder for a file with `series` series whose header has `origin_unix_nanos`.
    pub(crate) fn new(origin_unix_nanos: u64, series: usize) -> Self {
        let origin_micros = origin_unix_nanos / 1000;
        Self {
            origin_micros,
            last_micros: origin_micros,
            last: vec![0; series],
        }
    }

    /// The record for a sample (`values` in series order), or `None` when nothing changed.
    /// The encoder remembers the sample only on [`commit`](Self::commit), so a record that
    /// could not be queued is folded into the next one.
    pub(crate) fn record(&self, unix_nanos: u64, values: &[Option<u64>]) -> Option<Vec<u8>> {
        let changed = values
            .iter()
            .zip(&self.last)
            .any(|(v, last)| stored(*v) != *last);
        if !changed {
            return None;
        }
        let micros = (unix_nanos / 1000).max(self.last_micros);
        let mut out = Vec::with_capacity(8 + values.len());
        put_varint(&mut out, micros - self.last_micros);
        let mask_at = out.len();
        out.resize(mask_at + values.len().div_ceil(8), 0);
        for (i, (value, last)) in values.iter().zip(&self.last).enumerate() {
            let value = stored(*value);
            if value != *last {
                out[mask_at + i / 8] |= 1 << (i % 8);
                put_varint(&mut out, value.wrapping_sub(*last) as i64);
            }
        }
        Some(out)
    }

    /// Remembers a sample whose record reached the file's queue.
    pub(crate) fn commit(&mut self, unix_nanos: u64, values: &[Option<u64>]) {
        self.last_micros = (unix_nanos / 1000).max(self.last_micros);
        for (last, value) in self.last.iter_mut().zip(values) {
            *last = stored(*value);
        }
        debug_assert!(self.last_micros >= self.origin_micros);
    }
}

/// Builds a timeline file from samples given in code, in the format runs write: for
/// tools and benchmarks that make run directories of their own.
#[derive(Debug)]
pub struct TimelineEncoder {
    encoder: Encoder,
    series: usize,
    bytes: Vec<u8>,
}

impl TimelineEncoder {
    /// A file for `devices`, its times counted from `origin_unix_nanos`.
    pub fn new(origin_unix_nanos: u64, interval_nanos: u64, devices: &[TimelineDevice]) -> Self {
        let series = figures(devices.len()).len();
        Self {
            encoder: Encoder::new(origin_unix_nanos, series),
            series,
            bytes: header(origin_unix_nanos, interval_nanos, devices),
        }
    }

    /// One sample: `values` in series order (used of each device, total of each device,
    /// process GPU memory, host RSS, allocated, reserved); missing values read as `None`.
    pub fn push(&mut self, unix_nanos: u64, values: &[Option<u64>]) {
        let mut all = values.to_vec();
        all.resize(self.series, None);
        if let Some(record) = self.encoder.record(unix_nanos, &all) {
            self.bytes.extend_from_slice(&record);
            self.encoder.commit(unix_nanos, &all);
        }
    }

    /// The file's bytes so far.
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }
}

/// Reads bytes from a slice; `None` at the end.
struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Cursor<'_> {
    fn varint<T: VarInt>(&mut self) -> Option<T> {
        let (value, length) = T::decode_var(self.bytes.get(self.at..)?)?;
        self.at += length;
        Some(value)
    }

    fn take(&mut self, n: usize) -> Option<&[u8]> {
        let end = self.at.checked_add(n)?;
        let slice = self.bytes.get(self.at..end)?;
        self.at = end;
        Some(slice)
    }

    fn string(&mut self) -> Option<String> {
        let n = self.varint::<usize>()?;
        Some(String::from_utf8_lossy(self.take(n)?).into_owned())
    }
}

/// Reads a timeline file.
///
/// # Errors
/// The file cannot be read, or is not a timeline file of this version.
pub fn read_timeline(path: &Path) -> Result<Timeline, TimelineError> {
    let bytes = std::fs::read(path).map_err(|source| TimelineError::Io {
        path: path.display().to_string(),
        source,
    })?;
    decode(&bytes).map_err(|why| TimelineError::Format {
        path: path.display().to_string(),
        why,
    })
}

/// Decodes a whole file.
pub(crate) fn decode(bytes: &[u8]) -> Result<Timeline, TimelineFormatError> {
    use TimelineFormatError::HeaderCut;
    if bytes.get(..8) != Some(MAGIC.as_slice()) {
        return Err(TimelineFormatError::Magic);
    }
    let mut cursor = Cursor { bytes, at: 8 };
    let version: u64 = cursor.varint().ok_or(HeaderCut)?;
    if version != VERSION {
        return Err(TimelineFormatError::Version(version));
    }
    let origin: u64 = cursor.varint().ok_or(HeaderCut)?;
    let interval = cursor.varint().ok_or(HeaderCut)?;
    let count: u64 = cursor.varint().ok_or(HeaderCut)?;
    if count > 4096 {
        return Err(TimelineFormatError::Devices(count));
    }
    let mut devices = Vec::new();
    for _ in 0..count {
        let id: u64 = cursor.varint().ok_or(HeaderCut)?;
        devices.push(TimelineDevice {
            id: decode_id(id),
            uuid: cursor.string().ok_or(HeaderCut)?,
            name: cursor.string().ok_or(HeaderCut)?,
        });
    }
    let mut series: Vec<Series> = figures(devices.len())
        .into_iter()
        .map(|figure| Series {
            figure,
            points: Vec::new(),
        })
        .collect();
    let mask_len = series.len().div_ceil(8);
    let mut last = vec![0u64; series.len()];
    let mut micros = origin / 1000;
    let mut truncated = false;
    let mut changes: Vec<(usize, u64)> = Vec::with_capacity(series.len());
    while cursor.at < bytes.len() {
        let Some(record) = read_record(&mut cursor, mask_len, &last, &mut changes) else {
            truncated = true;
            break;
        };
        micros = micros.saturating_add(record);
        for &(i, value) in &changes {
            last[i] = value;
            let value = value.checked_sub(1);
            series[i].points.push((micros.saturating_mul(1000), value));
        }
    }
    Ok(Timeline {
        origin_unix_nanos: origin,
        interval_nanos: interval,
        devices,
        series,
        last_unix_nanos: micros.saturating_mul(1000).max(origin),
        truncated,
    })
}

/// One record: its time step, and `(series, stored value)` for each change.
fn read_record(
    cursor: &mut Cursor<'_>,
    mask_len: usize,
    last: &[u64],
    changes: &mut Vec<(usize, u64)>,
) -> Option<u64> {
    changes.clear();
    let dt = cursor.varint()?;
    let mask_at = cursor.at;
    cursor.take(mask_len)?;
    let bytes = cursor.bytes;
    for (i, previous) in last.iter().enumerate() {
        if bytes[mask_at + i / 8] & (1 << (i % 8)) != 0 {
            let delta: i64 = cursor.varint()?;
            changes.push((i, previous.wrapping_add(delta as u64)));
        }
    }
    Some(dt)
}

#[cfg(test)]
mod tests;

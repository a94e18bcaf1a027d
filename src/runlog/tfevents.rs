//! TensorBoard event files, written directly: `tensorboard --logdir gpuspan-runs` shows each
//! run's step and epoch memory as scalars.
//!
//! A file is a sequence of records: `u64` length (little-endian), masked CRC-32C of those 8
//! bytes, the data, masked CRC-32C of the data. Each record's data is a protobuf `Event`
//! (`wall_time` = 1, `step` = 2, `file_version` = 3, `summary` = 5, whose `value` = 1 holds
//! `tag` = 1 and `simple_value` = 2). The first record is `file_version: "brain.Event:2"`.
//!
//! Tags: `step/<attribute>` at the step's ordinal among the run's steps (0, 1, ... in the
//! order they ended, so it grows across epochs), and `epoch/<attribute>` at `ml.epoch`,
//! for `gpu.memory.{start,peak,end}`, `gpu.<i>.memory.*` per device, and host memory
//! `process.memory.*`. Values are bytes (TensorBoard stores them as 32-bit floats).

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;

use opentelemetry_sdk::trace::SpanData;

use crate::export::tap::SpanTap;
use crate::figures::device_keys;
use crate::names::attribute as attr;
use crate::record::{Memory, Role, SpanRecord};

fn masked_crc(bytes: &[u8]) -> u32 {
    crc32c::crc32c(bytes)
        .rotate_right(15)
        .wrapping_add(0xa282_ead8)
}

/// TensorBoard's `Event`, the fields gpuspan writes. Every field is written when set (a
/// step of 0 too), as TensorBoard's own writer does; `file_version` and `summary` are the
/// `what` oneof, never both set.
#[derive(Clone, PartialEq, prost::Message)]
struct Event {
    #[prost(double, optional, tag = "1")]
    wall_time: Option<f64>,
    #[prost(int64, optional, tag = "2")]
    step: Option<i64>,
    #[prost(string, optional, tag = "3")]
    file_version: Option<String>,
    #[prost(message, optional, tag = "5")]
    summary: Option<Summary>,
}

/// `Summary`: its repeated `value`.
#[derive(Clone, PartialEq, prost::Message)]
struct Summary {
    #[prost(message, repeated, tag = "1")]
    value: Vec<SummaryValue>,
}

/// `Summary.Value` holding a scalar.
#[derive(Clone, PartialEq, prost::Message)]
struct SummaryValue {
    #[prost(string, tag = "1")]
    tag: String,
    #[prost(float, optional, tag = "2")]
    simple_value: Option<f32>,
}

/// One `Event` with a header and a summary of scalar values.
pub(crate) fn event(wall_time: f64, step: i64, scalars: &[(String, f32)]) -> Vec<u8> {
    let value = scalars
        .iter()
        .map(|(tag, value)| SummaryValue {
            tag: tag.clone(),
            simple_value: Some(*value),
        })
        .collect();
    prost::Message::encode_to_vec(&Event {
        wall_time: Some(wall_time),
        step: Some(step),
        file_version: None,
        summary: Some(Summary { value }),
    })
}

/// The first event of a file.
fn version_event(wall_time: f64) -> Vec<u8> {
    prost::Message::encode_to_vec(&Event {
        wall_time: Some(wall_time),
        step: None,
        file_version: Some("brain.Event:2".to_owned()),
        summary: None,
    })
}

/// Frames `data` as one record.
pub(crate) fn record(data: &[u8]) -> Vec<u8> {
    let length = (data.len() as u64).to_le_bytes();
    let mut out = Vec::with_capacity(data.len() + 16);
    out.extend_from_slice(&length);
    out.extend_from_slice(&masked_crc(&length).to_le_bytes());
    out.extend_from_slice(data);
    out.extend_from_slice(&masked_crc(data).to_le_bytes());
    out
}

/// The scalars of one span: `<prefix>/<attribute>` for every memory figure it carries.
pub(crate) fn scalars(prefix: &str, span: &SpanRecord) -> Vec<(String, f32)> {
    let mut out = Vec::new();
    let mut memory = |[start, peak, end]: [&str; 3], memory: Option<Memory>| {
        if let Some(m) = memory {
            for (key, value) in [(start, m.start), (peak, m.peak), (end, m.end)] {
                out.push((format!("{prefix}/{key}"), value as f32));
            }
        }
    };
    memory(
        [
            attr::GPU_MEMORY_START,
            attr::GPU_MEMORY_PEAK,
            attr::GPU_MEMORY_END,
        ],
        span.gpu,
    );
    memory(
        [
            attr::PROCESS_MEMORY_START,
            attr::PROCESS_MEMORY_PEAK,
            attr::PROCESS_MEMORY_END,
        ],
        span.host,
    );
    for device in &span.devices {
        let [start, end, peak] = device_keys(device.id);
        for (key, value) in [
            (start, device.start),
            (peak, device.peak),
            (end, device.end),
        ] {
            if let Some(value) = value {
                out.push((format!("{prefix}/{key}"), value as f32));
            }
        }
    }
    out
}

/// Writes each step's and epoch's memory as TensorBoard scalars, on the export thread.
pub(crate) struct TensorBoardTap {
    file: BufWriter<File>,
    steps: i64,
    failed: bool,
    path: std::path::PathBuf,
}

impl TensorBoardTap {
    /// Creates `events.out.tfevents.<seconds>.<host>.gpuspan` in `dir`.
    pub(crate) fn create(dir: &Path) -> std::io::Result<Self> {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        let host = crate::resource::host_name().unwrap_or_else(|| "localhost".into());
        let path = dir.join(format!(
            "events.out.tfevents.{}.{host}.gpuspan",
            now.as_secs()
        ));
        let mut file = BufWriter::new(File::create(&path)?);
        file.write_all(&record(&version_event(now.as_secs_f64())))?;
        file.flush()?;
        Ok(Self {
            file,
            steps: 0,
            failed: false,
            path,
        })
    }

    fn write(&mut self, data: &[u8]) {
        if self.failed {
            return;
        }
        if let Err(e) = self.file.write_all(&record(data)) {
            self.failed = true;
            eprintln!(
                "gpuspan: warning: TensorBoard scalars stop here: cannot write {}: {e}",
                self.path.display()
            );
        }
    }
}

impl SpanTap for TensorBoardTap {
    fn on_span(&mut self, _span: &mut SpanData, record: &SpanRecord) {
        let (prefix, step) = match record.role {
            Role::Step(_) => {
                self.steps += 1;
                ("step", self.steps - 1)
            }
            Role::Epoch(epoch) => ("epoch", epoch),
            _ => return,
        };
        let values = scalars(prefix, record);
        if values.is_empty() {
            return;
        }
        let wall_time = record.end_unix_nanos as f64 / 1e9;
        self.write(&event(wall_time, step, &values));
    }

    fn flush(&mut self) {
        if !self.failed {
            let _ = self.file.flush();
        }
    }
}

impl Drop for TensorBoardTap {
    fn drop(&mut self) {
        let _ = self.file.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc32c_matches_the_published_check_value() {
        // The CRC-32C check value of "123456789" (RFC 3720, appendix B.4).
        assert_eq!(crc32c::crc32c(b"123456789"), 0xe306_9283);
    }

    #[test]
    fn an_event_is_the_protobuf_tensorboard_reads() {
        let mut expected = vec![0x09];
        expected.extend_from_slice(&1.5f64.to_le_bytes());
        // step 0 is written; summary { value { tag "a", simple_value 2.0 } }.
        expected.extend_from_slice(&[0x10, 0x00, 0x2a, 0x0a, 0x0a, 0x08, 0x0a, 0x01, b'a', 0x15]);
        expected.extend_from_slice(&2.0f32.to_le_bytes());
        assert_eq!(event(1.5, 0, &[("a".into(), 2.0)]), expected);
        let mut version = vec![0x09];
        version.extend_from_slice(&1.5f64.to_le_bytes());
        version.extend_from_slice(&[0x1a, 13]);
        version.extend_from_slice(b"brain.Event:2");
        assert_eq!(version_event(1.5), version);
    }

    #[test]
    fn a_record_frames_its_data() {
        let framed = record(b"abc");
        assert_eq!(&framed[..8], &3u64.to_le_bytes());
        assert_eq!(&framed[12..15], b"abc");
        assert_eq!(framed.len(), 8 + 4 + 3 + 4);
        assert_eq!(&framed[15..], &masked_crc(b"abc").to_le_bytes());
    }
}

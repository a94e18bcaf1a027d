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
use crate::record::{Role, SpanRecord};

/// CRC-32C (Castagnoli), bitwise per byte through a table.
fn crc32c(bytes: &[u8]) -> u32 {
    static TABLE: std::sync::OnceLock<[u32; 256]> = std::sync::OnceLock::new();
    let table = TABLE.get_or_init(|| {
        let mut table = [0u32; 256];
        for (i, slot) in table.iter_mut().enumerate() {
            let mut crc = i as u32;
            for _ in 0..8 {
                crc = if crc & 1 != 0 {
                    (crc >> 1) ^ 0x82f6_3b78
                } else {
                    crc >> 1
                };
            }
            *slot = crc;
        }
        table
    });
    let mut crc = !0u32;
    for &byte in bytes {
        crc = table[((crc ^ u32::from(byte)) & 0xff) as usize] ^ (crc >> 8);
    }
    !crc
}

fn masked_crc(bytes: &[u8]) -> u32 {
    let crc = crc32c(bytes);
    crc.rotate_right(15).wrapping_add(0xa282_ead8)
}

fn varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

fn length_delimited(out: &mut Vec<u8>, field: u64, bytes: &[u8]) {
    varint(out, field << 3 | 2);
    varint(out, bytes.len() as u64);
    out.extend_from_slice(bytes);
}

/// One `Event` with a header and a summary of scalar values.
pub(crate) fn event(wall_time: f64, step: i64, scalars: &[(String, f32)]) -> Vec<u8> {
    let mut out = Vec::new();
    varint(&mut out, 1 << 3 | 1);
    out.extend_from_slice(&wall_time.to_le_bytes());
    varint(&mut out, 2 << 3);
    varint(&mut out, step as u64);
    let mut summary = Vec::new();
    for (tag, value) in scalars {
        let mut entry = Vec::new();
        length_delimited(&mut entry, 1, tag.as_bytes());
        varint(&mut entry, 2 << 3 | 5);
        entry.extend_from_slice(&value.to_le_bytes());
        length_delimited(&mut summary, 1, &entry);
    }
    length_delimited(&mut out, 5, &summary);
    out
}

/// The first event of a file.
fn version_event(wall_time: f64) -> Vec<u8> {
    let mut out = Vec::new();
    varint(&mut out, 1 << 3 | 1);
    out.extend_from_slice(&wall_time.to_le_bytes());
    length_delimited(&mut out, 3, b"brain.Event:2");
    out
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
    let mut memory = |name: &str, memory: Option<crate::record::Memory>| {
        if let Some(m) = memory {
            for (figure, value) in [("start", m.start), ("peak", m.peak), ("end", m.end)] {
                out.push((format!("{prefix}/{name}.{figure}"), value as f32));
            }
        }
    };
    memory("gpu.memory", span.gpu);
    memory("process.memory", span.host);
    for device in &span.devices {
        for (figure, value) in [
            ("start", device.start),
            ("peak", device.peak),
            ("end", device.end),
        ] {
            if let Some(value) = value {
                out.push((
                    format!("{prefix}/gpu.{}.memory.{figure}", device.index),
                    value as f32,
                ));
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
        assert_eq!(crc32c(b"123456789"), 0xe306_9283);
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

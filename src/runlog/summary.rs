//! Reads a run directory's `traces.jsonl` back and draws the per-epoch table, both for the
//! summary printed at shutdown and for `gpuspan report`.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::BufRead;
use std::path::Path;

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::trace::v1::status::StatusCode;

/// Start, peak and end of one memory figure over an epoch, in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Memory {
    /// At the start of the epoch.
    pub start: i64,
    /// Highest while it was open.
    pub peak: i64,
    /// At its end.
    pub end: i64,
}

/// One row of the summary.
#[derive(Debug, Clone, PartialEq)]
pub struct EpochSummary {
    /// `ml.epoch`.
    pub epoch: i64,
    /// Wall time, in seconds.
    pub seconds: f64,
    /// Steps recorded inside the epoch.
    pub steps: usize,
    /// Device memory (`gpu.memory.*`), when a GPU source was available.
    pub gpu: Option<Memory>,
    /// This process's GPU memory peak (`gpu.process.memory.peak`), where reported.
    pub process_gpu_peak: Option<i64>,
    /// Host resident memory (`process.memory.*`).
    pub host: Option<Memory>,
    /// The span's error status message, if any (a device lost, a panic).
    pub error: Option<String>,
}

/// What a run directory holds.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunSummary {
    /// Epoch rows, in epoch order.
    pub epochs: Vec<EpochSummary>,
    /// `gpu.memory.source` of the spans (`nvml`, `nvidia-smi`, `none`).
    pub source: Option<String>,
    /// Lines that could not be read, as `line N: why` (a run killed mid-write leaves one).
    pub bad_lines: Vec<String>,
    /// Diagnosis marks per epoch, `(epoch, what)`: a suspected leak, a budget exceeded.
    pub marks: Vec<(i64, String)>,
    /// Diagnosis lines printed under the table: budget headroom, batch-size fit.
    pub notes: Vec<String>,
}

/// Reads `<dir>/traces.jsonl`.
///
/// # Errors
/// The file cannot be opened or read. Lines that do not parse are listed in
/// [`RunSummary::bad_lines`], and the others still count.
pub fn read_run(dir: &Path) -> std::io::Result<RunSummary> {
    let path = dir.join(super::TRACES_FILE);
    let file = std::fs::File::open(&path).map_err(|e| {
        std::io::Error::new(
            e.kind(),
            format!(
                "cannot open {}: {e} (is {} a gpuspan run directory?)",
                path.display(),
                dir.display()
            ),
        )
    })?;
    let mut summary = RunSummary::default();
    let mut epochs = Vec::new();
    let mut steps_by_parent: HashMap<Vec<u8>, usize> = HashMap::new();
    let mut diagnosis = crate::diagnose::RunReader::default();
    for (number, line) in std::io::BufReader::new(file).lines().enumerate() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        let request: ExportTraceServiceRequest = match serde_json::from_str(&line) {
            Ok(request) => request,
            Err(e) => {
                summary.bad_lines.push(format!("line {}: {e}", number + 1));
                continue;
            }
        };
        for span in request
            .resource_spans
            .iter()
            .flat_map(|r| &r.scope_spans)
            .flat_map(|s| &s.spans)
        {
            if summary.source.is_none() {
                summary.source = string(&span.attributes, "gpu.memory.source");
            }
            diagnosis.read(span);
            match span.name.as_str() {
                "step" => {
                    *steps_by_parent
                        .entry(span.parent_span_id.clone())
                        .or_default() += 1
                }
                "epoch" => {
                    let attrs = &span.attributes;
                    let error = span
                        .status
                        .as_ref()
                        .filter(|s| s.code == StatusCode::Error as i32)
                        .map(|s| s.message.clone());
                    let row = EpochSummary {
                        epoch: int(attrs, "ml.epoch").unwrap_or(-1),
                        seconds: span
                            .end_time_unix_nano
                            .saturating_sub(span.start_time_unix_nano)
                            as f64
                            / 1e9,
                        steps: 0,
                        gpu: memory(attrs, "gpu.memory"),
                        process_gpu_peak: int(attrs, "gpu.process.memory.peak"),
                        host: memory(attrs, "process.memory"),
                        error,
                    };
                    epochs.push((span.span_id.clone(), row));
                }
                _ => {}
            }
        }
    }
    for (id, mut row) in epochs {
        row.steps = steps_by_parent.get(&id).copied().unwrap_or(0);
        summary.epochs.push(row);
    }
    summary.epochs.sort_by_key(|row| row.epoch);
    diagnosis.finish(&mut summary);
    Ok(summary)
}

fn attr<'a>(attrs: &'a [KeyValue], key: &str) -> Option<&'a Value> {
    attrs
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.as_ref())
        .and_then(|v| v.value.as_ref())
}

fn int(attrs: &[KeyValue], key: &str) -> Option<i64> {
    match attr(attrs, key)? {
        Value::IntValue(v) => Some(*v),
        _ => None,
    }
}

fn string(attrs: &[KeyValue], key: &str) -> Option<String> {
    match attr(attrs, key)? {
        Value::StringValue(v) => Some(v.clone()),
        _ => None,
    }
}

fn memory(attrs: &[KeyValue], prefix: &str) -> Option<Memory> {
    Some(Memory {
        start: int(attrs, &format!("{prefix}.start"))?,
        peak: int(attrs, &format!("{prefix}.peak"))?,
        end: int(attrs, &format!("{prefix}.end"))?,
    })
}

impl RunSummary {
    /// The table: one row per epoch with duration, steps and memory at start, peak and end.
    pub fn render(&self) -> String {
        let mut out = String::new();
        if self.epochs.is_empty() {
            out.push_str("no epoch spans recorded\n");
        } else {
            let gpu = self.epochs.iter().any(|e| e.gpu.is_some());
            let process = self.epochs.iter().any(|e| e.process_gpu_peak.is_some());
            let mut header = vec!["epoch", "steps", "duration"];
            if gpu {
                header.extend(["gpu start", "gpu peak", "gpu end", "gpu delta"]);
            }
            if process {
                header.push("proc gpu peak");
            }
            header.extend(["host start", "host peak", "host end"]);
            let mut rows = vec![header.iter().map(|s| s.to_string()).collect::<Vec<_>>()];
            for e in &self.epochs {
                let mut row = vec![
                    e.epoch.to_string(),
                    e.steps.to_string(),
                    format!("{:.2} s", e.seconds),
                ];
                if gpu {
                    match e.gpu {
                        Some(m) => row.extend([
                            bytes(m.start),
                            bytes(m.peak),
                            bytes(m.end),
                            signed_bytes(m.end - m.start),
                        ]),
                        None => row.extend(["-".into(), "-".into(), "-".into(), "-".into()]),
                    }
                }
                if process {
                    row.push(e.process_gpu_peak.map_or("-".into(), bytes));
                }
                match e.host {
                    Some(m) => row.extend([bytes(m.start), bytes(m.peak), bytes(m.end)]),
                    None => row.extend(["-".into(), "-".into(), "-".into()]),
                }
                if let Some(error) = &e.error {
                    row.push(format!("error: {error}"));
                }
                row.extend(self.marks_of(e.epoch));
                rows.push(row);
            }
            let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
            let widths: Vec<usize> = (0..columns)
                .map(|c| {
                    rows.iter()
                        .filter_map(|r| r.get(c))
                        .map(|s| s.chars().count())
                        .max()
                        .unwrap_or(0)
                })
                .collect();
            for row in &rows {
                let cells: Vec<String> = row
                    .iter()
                    .enumerate()
                    .map(|(c, cell)| format!("{cell:>width$}", width = widths[c]))
                    .collect();
                let _ = writeln!(out, "{}", cells.join("  ").trim_end());
            }
        }
        match self.source.as_deref() {
            Some("none") | None => out.push_str(
                "gpu memory: no GPU source (NVML not found); host columns are this process's RSS\n",
            ),
            Some(source) => {
                let _ = writeln!(
                    out,
                    "gpu memory: read through {source}; host columns are this process's RSS"
                );
            }
        }
        for note in &self.notes {
            let _ = writeln!(out, "{note}");
        }
        for bad in &self.bad_lines {
            let _ = writeln!(out, "warning: skipped unreadable {bad}");
        }
        out
    }
}

impl RunSummary {
    /// The diagnosis marks of one epoch, joined into one cell (none: no cell).
    fn marks_of(&self, epoch: i64) -> Option<String> {
        let marks: Vec<&str> = self
            .marks
            .iter()
            .filter(|(e, _)| *e == epoch)
            .map(|(_, m)| m.as_str())
            .collect();
        (!marks.is_empty()).then(|| format!("<- {}", marks.join(", ")))
    }
}

/// Bytes in binary units, three significant digits.
pub(crate) fn bytes(value: i64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = value.unsigned_abs() as f64;
    let mut unit = 0;
    while v >= 1024.0 && unit < UNITS.len() - 1 {
        v /= 1024.0;
        unit += 1;
    }
    let sign = if value < 0 { "-" } else { "" };
    if unit == 0 {
        format!("{sign}{v:.0} B")
    } else if v >= 100.0 {
        format!("{sign}{v:.0} {}", UNITS[unit])
    } else {
        format!("{sign}{v:.1} {}", UNITS[unit])
    }
}

fn signed_bytes(value: i64) -> String {
    if value > 0 {
        format!("+{}", bytes(value))
    } else {
        bytes(value)
    }
}

#[cfg(test)]
mod tests {
    use super::bytes;

    #[test]
    fn byte_counts_read_in_binary_units() {
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(1536), "1.5 KiB");
        assert_eq!(bytes(150 << 20), "150 MiB");
        assert_eq!(bytes(-(3 << 30)), "-3.0 GiB");
    }
}

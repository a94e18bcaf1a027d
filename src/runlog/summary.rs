//! Reads a run directory's `traces.jsonl` back and draws the per-epoch table, both for the
//! summary printed at shutdown and for `gpuspan report`.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::BufRead;
use std::path::Path;

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;

use crate::record::{Memory, Role, SpanRecord};
use crate::util::bytes::{human, signed};

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
    /// The batch-size fit of the run's steps, as [`Telemetry::batch_fit`](crate::Telemetry::batch_fit)
    /// gives it: read back from a run directory, fitted to the limits the run recorded.
    pub batch_fit: Option<crate::diagnose::BatchFit>,
}

/// Builds the per-epoch table from closed spans, in the order they ended. The one rule for
/// both the table printed at shutdown (fed on the export thread) and `gpuspan report`
/// (fed from `traces.jsonl`): an epoch's steps are its child `step` spans.
#[derive(Debug, Default)]
pub struct EpochTable {
    epochs: Vec<([u8; 8], EpochSummary)>,
    steps_by_parent: HashMap<[u8; 8], usize>,
    source: Option<String>,
}

impl EpochTable {
    /// Adds one closed span.
    pub fn add(&mut self, record: &SpanRecord) {
        if self.source.is_none() {
            self.source.clone_from(&record.source);
        }
        match record.role {
            Role::Step(_) => {
                if let Some(parent) = record.parent_span_id {
                    *self.steps_by_parent.entry(parent).or_default() += 1;
                }
            }
            Role::Epoch(epoch) => self.epochs.push((
                record.span_id,
                EpochSummary {
                    epoch,
                    seconds: record.seconds(),
                    steps: 0,
                    gpu: record.gpu,
                    process_gpu_peak: record.process_gpu.map(|m| m.peak),
                    host: record.host,
                    error: record.error.clone(),
                },
            )),
            Role::Other => {}
        }
    }

    /// The table, epochs in order.
    pub fn summary(&self) -> RunSummary {
        let mut epochs: Vec<EpochSummary> = self
            .epochs
            .iter()
            .map(|(id, row)| EpochSummary {
                steps: self.steps_by_parent.get(id).copied().unwrap_or(0),
                ..row.clone()
            })
            .collect();
        epochs.sort_by_key(|row| row.epoch);
        RunSummary {
            epochs,
            source: self.source.clone(),
            ..RunSummary::default()
        }
    }
}

/// Keeps the epoch table as spans are exported, for the summary printed at shutdown.
#[derive(Debug, Clone, Default)]
pub(crate) struct SummaryTap(pub(crate) std::sync::Arc<std::sync::Mutex<EpochTable>>);

impl crate::export::tap::SpanTap for SummaryTap {
    fn on_span(&mut self, _span: &mut opentelemetry_sdk::trace::SpanData, record: &SpanRecord) {
        if let Ok(mut table) = self.0.lock() {
            table.add(record);
        }
    }
}

/// Reads `<dir>/traces.jsonl`.
///
/// # Errors
/// The file cannot be opened or read. Lines that do not parse are listed in
/// [`RunSummary::bad_lines`], and the others still count.
pub fn read_run(dir: &Path) -> std::io::Result<RunSummary> {
    read_run_and(dir, |_| {}).map(|(summary, _)| summary)
}

/// [`read_run`], in the same pass handing every span's record to `keep` and returning the
/// diagnosis markers too: the report reads the file once.
///
/// # Errors
/// As [`read_run`].
pub fn read_run_and(
    dir: &Path,
    mut keep: impl FnMut(SpanRecord),
) -> std::io::Result<(RunSummary, Vec<crate::diagnose::Marker>)> {
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
    let mut table = EpochTable::default();
    let mut bad_lines = Vec::new();
    let mut diagnosis = crate::diagnose::RunReader::default();
    for (number, line) in std::io::BufReader::new(file).split(b'\n').enumerate() {
        let line = line?;
        // A run killed mid-write can leave a line cut inside a character.
        let Ok(line) = std::str::from_utf8(&line) else {
            bad_lines.push(format!("line {}: not UTF-8 text", number + 1));
            continue;
        };
        if line.trim().is_empty() {
            continue;
        }
        let request: ExportTraceServiceRequest = match serde_json::from_str(line) {
            Ok(request) => request,
            Err(e) => {
                bad_lines.push(format!("line {}: {e}", number + 1));
                continue;
            }
        };
        for span in request
            .resource_spans
            .iter()
            .flat_map(|r| &r.scope_spans)
            .flat_map(|s| &s.spans)
        {
            let record = SpanRecord::from_otlp(span);
            diagnosis.read(span, &record);
            table.add(&record);
            keep(record);
        }
    }
    let mut summary = table.summary();
    summary.bad_lines = bad_lines;
    let findings = diagnosis.finish(crate::diagnose::read_batch_limit(dir));
    summary.marks.extend(findings.marks);
    summary.batch_fit = findings.batch_fit;
    summary.notes.extend(findings.notes);
    Ok((summary, findings.markers))
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
                            human(m.start),
                            human(m.peak),
                            human(m.end),
                            signed(m.end.saturating_sub(m.start)),
                        ]),
                        None => row.extend(["-".into(), "-".into(), "-".into(), "-".into()]),
                    }
                }
                if process {
                    row.push(e.process_gpu_peak.map_or("-".into(), human));
                }
                match e.host {
                    Some(m) => row.extend([human(m.start), human(m.peak), human(m.end)]),
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

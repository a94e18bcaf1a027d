//! Reads a run directory's `traces.jsonl` back and draws the per-epoch table, both for the
//! summary printed at shutdown and for `gpuspan report`.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::BufRead;
use std::path::Path;

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;

use super::throttle::{reasons_text, Throttled};
use crate::record::{Memory, Role, SpanRecord};
use crate::util::bytes::{human, signed};
use crate::util::energy::{joules, watts};

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
    /// `gpu.energy` of the epoch, in joules, where its devices' energy was read.
    pub energy: Option<f64>,
    /// Whether that figure was estimated from power readings (`gpu.energy.estimated`).
    pub energy_estimated: bool,
    /// `gpu.power.avg` of the epoch, in watts.
    pub power: Option<f64>,
    /// The mean `gpu.energy` of the epoch's steps that carry one, in joules.
    pub step_energy: Option<f64>,
    /// The epoch's steps that carry a `gpu.throttled` event.
    pub throttled: Throttled,
    /// The epoch span's own `gpu.throttled` event, as its reasons and lowest clock
    /// (` (sw_power_cap; SM clock down to 1210 MHz)`): a run of steps too short for a
    /// power reading each still shows that its clocks were held down.
    pub epoch_throttled: Option<String>,
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
    steps_by_parent: HashMap<[u8; 8], ParentSteps>,
    source: Option<String>,
}

/// What an epoch's steps add to its row.
#[derive(Debug, Default)]
struct ParentSteps {
    count: usize,
    /// The sum of the steps' energy, and how many steps carry one.
    energy: (f64, usize),
    throttled: Throttled,
}

impl EpochTable {
    /// Adds one closed span.
    pub fn add(&mut self, record: &SpanRecord) {
        if self.source.is_none() {
            self.source.clone_from(&record.source);
        }
        match record.role {
            Role::Step(step) => {
                if let Some(parent) = record.parent_span_id {
                    let steps = self.steps_by_parent.entry(parent).or_default();
                    steps.count += 1;
                    if let Some(joules) = record.energy.joules {
                        steps.energy.0 += joules;
                        steps.energy.1 += 1;
                    }
                    steps.throttled.add(step, &record.energy);
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
                    energy: record.energy.joules,
                    energy_estimated: record.energy.estimated,
                    power: record.energy.power_watts,
                    step_energy: None,
                    throttled: Throttled::default(),
                    epoch_throttled: record.energy.throttled.then(|| {
                        let reasons = record.energy.throttle_reasons.iter().cloned().collect();
                        reasons_text(&reasons, record.energy.sm_clock_min_mhz)
                    }),
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
            .map(|(id, row)| match self.steps_by_parent.get(id) {
                Some(steps) => EpochSummary {
                    steps: steps.count,
                    step_energy: (steps.energy.1 > 0)
                        .then(|| steps.energy.0 / steps.energy.1 as f64),
                    throttled: steps.throttled.clone(),
                    ..row.clone()
                },
                None => row.clone(),
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
            let energy = self.epochs.iter().any(|e| e.energy.is_some());
            let step_energy = self.epochs.iter().any(|e| e.step_energy.is_some());
            let mut header = vec!["epoch", "steps", "duration"];
            if gpu {
                header.extend(["gpu start", "gpu peak", "gpu end", "gpu delta"]);
            }
            if process {
                header.push("proc gpu peak");
            }
            header.extend(["host start", "host peak", "host end"]);
            if energy {
                header.extend(["energy", "power"]);
            }
            if step_energy {
                header.push("energy/step");
            }
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
                if energy {
                    row.push(e.energy.map_or("-".into(), |j| {
                        let tilde = if e.energy_estimated { "~" } else { "" };
                        format!("{tilde}{}", joules(j))
                    }));
                    row.push(e.power.map_or("-".into(), watts));
                }
                if step_energy {
                    row.push(e.step_energy.map_or("-".into(), joules));
                }
                if let Some(error) = &e.error {
                    row.push(format!("error: {error}"));
                }
                row.extend(self.marks_of(e));
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
        if let Some(line) = self.energy_line() {
            let _ = writeln!(out, "{line}");
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
    /// The marks of one epoch, its throttled steps first, then its diagnosis marks, joined
    /// into one cell (none: no cell).
    fn marks_of(&self, row: &EpochSummary) -> Option<String> {
        let throttled = if !row.throttled.is_empty() {
            Some(format!("throttled {}", row.throttled.describe()))
        } else {
            row.epoch_throttled
                .as_ref()
                .map(|reasons| format!("throttled{reasons}"))
        };
        let marks: Vec<&str> = throttled
            .as_deref()
            .into_iter()
            .chain(
                self.marks
                    .iter()
                    .filter(|(e, _)| *e == row.epoch)
                    .map(|(_, m)| m.as_str()),
            )
            .collect();
        (!marks.is_empty()).then(|| format!("<- {}", marks.join(", ")))
    }

    /// `energy: 1.23 kJ over 3 epochs, 280 W on average`, with what a `~` means when an
    /// epoch's figure is an estimate; `None` when no epoch has one.
    pub fn energy_line(&self) -> Option<String> {
        let with: Vec<&EpochSummary> = self.epochs.iter().filter(|e| e.energy.is_some()).collect();
        if with.is_empty() {
            return None;
        }
        let total: f64 = with.iter().filter_map(|e| e.energy).sum();
        let seconds: f64 = with.iter().map(|e| e.seconds).sum();
        let mut line = format!(
            "energy: {} over {} epoch{}",
            joules(total),
            with.len(),
            if with.len() == 1 { "" } else { "s" }
        );
        if seconds > 0.0 {
            let _ = write!(line, ", {} on average", watts(total / seconds));
        }
        if with.len() < self.epochs.len() {
            let _ = write!(
                line,
                " ({} without a figure: a counter went back or stopped answering)",
                self.epochs.len() - with.len()
            );
        }
        if with.iter().any(|e| e.energy_estimated) {
            line.push_str("; ~ an estimate from power readings");
        }
        Some(line)
    }
}

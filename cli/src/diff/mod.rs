//! `gpuspan diff BASE NEW`: two runs compared, so that a change that costs memory is seen
//! before it ships. Each side is a run directory, a job's directory or an OTLP/JSON traces
//! file; the spans are lined up by rank, span name, device, epoch and `ml.step`
//! (`align.rs`), compared figure by figure over what both sides have (`compare.rs`) and held
//! to the `--max-increase` limits (`limits.rs`); the outcome prints as a table, Markdown,
//! HTML or JSON (`render.rs`).
//!
//! Reading is the only cost that grows with the runs: the two sides are read at once, on
//! two threads.

mod align;
pub mod cli;
mod compare;
mod figure;
mod limits;
mod load;
mod render;
mod scan;
mod wire;

use std::path::{Path, PathBuf};

use serde::Serialize;

pub use align::{Device, Place};
pub use compare::{FigureChange, Row, SpanRef, Unmatched};
pub use figure::Figure;
pub use limits::{BadLimit, Limit, MaxIncrease};

/// The JSON shape's version, its first field: a field is only ever added.
pub const JSON_VERSION: u32 = 1;

/// Why two runs could not be compared (`gpuspan diff` exits 2).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DiffError {
    /// A path could not be read.
    #[error(
        "cannot read {}: {source}; give a run directory (gpuspan-runs/<run-id>), a job's \
         directory (a rank-<r> run per rank) or an OTLP/JSON traces file",
        path.display()
    )]
    Read {
        /// The path.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A directory holds neither a run nor a job's ranks.
    #[error(
        "{} holds no run: expected traces.jsonl in it, or rank-<r>/traces.jsonl below it \
         (for a directory of runs, give the run: gpuspan-runs/<run-id>)",
        path.display()
    )]
    NoRun {
        /// The directory.
        path: PathBuf,
    },
    /// A line of a traces file is not an OTLP/JSON export request.
    #[error(
        "{}, line {line}: {why}; each line must be one OTLP/JSON ExportTraceServiceRequest, \
         as gpuspan's traces.jsonl and the OpenTelemetry Collector's file exporter write them \
         (remove or repair the line)",
        path.display()
    )]
    Line {
        /// The file.
        path: PathBuf,
        /// The line's number, from 1.
        line: usize,
        /// What is wrong with it.
        why: String,
    },
    /// A side holds no span with memory figures.
    #[error(
        "{} holds no span with GPU memory figures (gpu.memory.peak): record the run with a \
         GPU source (NVML or nvidia-smi), or its spans through gpuspan collect or gpuspan run",
        path.display()
    )]
    NoFigures {
        /// The path given.
        path: PathBuf,
    },
    /// The two sides share no span to compare.
    #[error(
        "nothing to compare: {base} holds {base_has} and {new} holds {new_has}, with no \
         span in common by rank, name, epoch and ml.step"
    )]
    NothingInCommon {
        /// The base's path.
        base: String,
        /// What the base holds.
        base_has: String,
        /// The new run's path.
        new: String,
        /// What the new run holds.
        new_has: String,
    },
}

/// One side of the outcome.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SideSummary {
    /// The path given.
    pub path: String,
    /// Its ranks (empty: one run that names none).
    pub ranks: Vec<String>,
    /// Spans with memory figures.
    pub spans: usize,
    /// Its step with the highest peak (of any span, without steps), compared or not.
    pub worst: Option<SpanRef>,
    /// Lines passed over (a last line cut short).
    pub skipped: Vec<String>,
}

/// The outcome of a comparison.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Diff {
    /// [`JSON_VERSION`].
    pub gpuspan_diff: u32,
    /// The base.
    pub base: SideSummary,
    /// The new run.
    pub new: SideSummary,
    /// The limits held to (none: the comparison only reports).
    #[serde(serialize_with = "limits_list")]
    pub max_increase: MaxIncrease,
    /// Whether no figure went past its limit.
    pub passed: bool,
    /// Each row both sides have.
    pub rows: Vec<Row>,
    /// Spans only the base has, by rank and name.
    pub only_base: Vec<Unmatched>,
    /// Spans only the new run has.
    pub only_new: Vec<Unmatched>,
}

fn limits_list<S: serde::Serializer>(limits: &MaxIncrease, out: S) -> Result<S::Ok, S::Error> {
    #[derive(Serialize)]
    struct Entry {
        figure: Figure,
        limit: Limit,
    }
    out.collect_seq(limits.iter().map(|(figure, limit)| Entry { figure, limit }))
}

impl Diff {
    /// Compares the runs at `base` and `new`, holding every figure to `max_increase`.
    ///
    /// # Errors
    /// A side cannot be read, holds no memory figures, or the two share no span.
    pub fn compare(base: &Path, new: &Path, max_increase: MaxIncrease) -> Result<Self, DiffError> {
        let (base_side, new_side) = std::thread::scope(|scope| {
            let other = scope.spawn(|| load::Side::read(new));
            let base_side = load::Side::read(base);
            let new_side = other.join().unwrap_or_else(|_| {
                Err(DiffError::NoFigures {
                    path: new.to_path_buf(),
                })
            });
            (base_side, new_side)
        });
        let (base_side, new_side) = (base_side?, new_side?);
        let one_run = base_side.ranks.len() == 1 && new_side.ranks.len() == 1;
        let base_rows = align::rows(&base_side, one_run);
        let new_rows = align::rows(&new_side, one_run);
        let compared = compare::compare(
            &base_rows,
            &new_rows,
            (base_side.batch_limit, new_side.batch_limit),
            &max_increase,
        );
        if compared.rows.is_empty() {
            return Err(DiffError::NothingInCommon {
                base: base.display().to_string(),
                base_has: render::holdings(&base_rows),
                new: new.display().to_string(),
                new_has: render::holdings(&new_rows),
            });
        }
        let passed = !compared
            .rows
            .iter()
            .flat_map(|r| &r.figures)
            .any(|f| f.past_limit);
        Ok(Self {
            gpuspan_diff: JSON_VERSION,
            base: summary(&base_side, &base_rows),
            new: summary(&new_side, &new_rows),
            max_increase,
            passed,
            rows: compared.rows,
            only_base: compared.only_base,
            only_new: compared.only_new,
        })
    }

    /// The figures past their limit, with their rows.
    pub fn regressions(&self) -> impl Iterator<Item = (&Row, &FigureChange)> {
        self.rows
            .iter()
            .flat_map(|row| row.figures.iter().map(move |f| (row, f)))
            .filter(|(_, f)| f.past_limit)
    }

    /// The command's exit status: 0 within the limits, 1 past one.
    pub fn exit_code(&self) -> u8 {
        u8::from(!self.passed)
    }

    /// The outcome as JSON (the shape docs/diff.md describes).
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_default()
    }
}

fn summary(
    side: &load::Side,
    rows: &std::collections::BTreeMap<align::RowKey, align::Series>,
) -> SideSummary {
    SideSummary {
        path: side.path.display().to_string(),
        ranks: side.ranks.iter().filter_map(|r| r.rank.clone()).collect(),
        spans: side
            .ranks
            .iter()
            .flat_map(|r| &r.spans)
            .filter(|s| s.gpu.is_some() || !s.devices.is_empty())
            .count(),
        worst: compare::worst_of(rows),
        skipped: side.skipped.clone(),
    }
}

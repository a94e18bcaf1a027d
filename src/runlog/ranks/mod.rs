//! A job of several ranks read together (`gpuspan report` on a job's directory): per epoch,
//! the rank with the highest peak, the skew between the ranks' peaks and the slowest rank;
//! over the step indexes every rank ran, the widest skew and the ranks most often worst
//! and slowest; the rank that ran out of memory first; each rank's energy and the job's
//! (`energy.rs`), and a throttled rank that held the others up. One rank holding more than
//! the others, or waiting on them, shows here.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::path::PathBuf;

use crate::config::RANK_DIR_PREFIX;
use crate::diagnose::Marker;
use crate::names::{attribute as attr, event};
use crate::record::{EnergyFigures, Role, SpanRecord};
use crate::util::bytes::human;

/// Reads each run in `runs` once (the ranks of a job, or one run): each run's own summary,
/// in order, and the job's table over them.
///
/// # Errors
/// A run's `traces.jsonl` cannot be opened or read.
pub fn read_job(runs: &[PathBuf]) -> std::io::Result<(Vec<super::RunSummary>, JobTable)> {
    let mut job = JobTable::default();
    let mut summaries = Vec::with_capacity(runs.len());
    for run in runs {
        let name = run.file_name().map(|n| n.to_string_lossy().into_owned());
        job.add_rank(name.as_deref().unwrap_or("?"));
        let (summary, markers) = super::read_run_and(run, |record| job.add_span(&record))?;
        job.add_markers(&markers);
        summaries.push(summary);
    }
    Ok((summaries, job))
}

/// One rank's figures of one epoch or step: its peak device memory, its wall time, its
/// energy and whether its clocks were held down.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RankFigures {
    /// `gpu.memory.peak`, in bytes.
    pub peak: Option<i64>,
    /// The span's wall time.
    pub seconds: f64,
    /// `gpu.energy`, in joules.
    pub energy: Option<f64>,
    /// Whether that figure was estimated from power readings.
    pub estimated: bool,
    /// Whether the span carries a `gpu.throttled` event.
    pub throttled: bool,
}

/// A step by its epoch (when its parent span is one: a loop that counts steps from 0 in
/// every epoch) and its `ml.step`.
pub type StepKey = (Option<i64>, i64);

/// One rank's run.
#[derive(Debug, Default)]
struct Rank {
    name: String,
    epochs: BTreeMap<i64, RankFigures>,
    /// The epochs' span ids, to place the steps.
    epoch_spans: HashMap<[u8; 8], i64>,
    /// Steps as read: their parent span, `ml.step`, figures.
    steps: Vec<(Option<[u8; 8]>, i64, RankFigures)>,
    /// The throttled steps' reasons and clocks, as read: parent span, `ml.step`, figures.
    throttled: Vec<(Option<[u8; 8]>, i64, EnergyFigures)>,
    /// The rank's first out-of-memory error, first near-OOM crossing and first OOM
    /// forecast.
    first_oom: Option<Marker>,
    first_near_oom: Option<Marker>,
    first_forecast: Option<Marker>,
}

impl Rank {
    fn steps(&self) -> BTreeMap<StepKey, RankFigures> {
        self.steps
            .iter()
            .map(|&(parent, step, figures)| ((self.epoch_of(parent), step), figures))
            .collect()
    }

    /// The epoch a step's parent span is, if it is one.
    fn epoch_of(&self, parent: Option<[u8; 8]>) -> Option<i64> {
        parent.and_then(|id| self.epoch_spans.get(&id).copied())
    }
}

/// The ranks of a job, added one run directory at a time.
#[derive(Debug, Default)]
pub struct JobTable {
    ranks: Vec<Rank>,
}

/// The ranks' figures of one epoch or step index.
#[derive(Debug, Clone, PartialEq)]
pub struct JobRow {
    /// `(rank, peak)` of the highest peak.
    pub worst: Option<(String, i64)>,
    /// The lowest peak.
    pub lowest: Option<i64>,
    /// (max - min) / max of the peaks, with two peaks or more.
    pub skew: Option<f64>,
    /// `(rank, seconds)` of the longest.
    pub slowest: (String, f64),
}

impl JobTable {
    /// Starts the rank called `name` (its directory's name, `rank-<r>` in a job):
    /// the spans added next are its.
    pub fn add_rank(&mut self, name: &str) {
        let name = name
            .strip_prefix(RANK_DIR_PREFIX)
            .unwrap_or(name)
            .to_owned();
        self.ranks.push(Rank {
            name,
            ..Rank::default()
        });
    }

    /// Adds one span of the rank added last: its epochs and steps are what is kept.
    pub fn add_span(&mut self, record: &SpanRecord) {
        let Some(rank) = self.ranks.last_mut() else {
            return;
        };
        let figures = RankFigures {
            peak: record.gpu.map(|m| m.peak),
            seconds: record.seconds(),
            energy: record.energy.joules,
            estimated: record.energy.estimated,
            throttled: record.energy.throttled,
        };
        match record.role {
            Role::Epoch(epoch) => {
                rank.epochs.insert(epoch, figures);
                rank.epoch_spans.insert(record.span_id, epoch);
            }
            Role::Step(step) => {
                rank.steps.push((record.parent_span_id, step, figures));
                if figures.throttled {
                    let energy = record.energy.clone();
                    rank.throttled.push((record.parent_span_id, step, energy));
                }
            }
            Role::Other => {}
        }
    }

    /// Adds the diagnosis markers of the rank added last: its first OOM, near-OOM and OOM
    /// forecast are what is kept.
    pub fn add_markers(&mut self, markers: &[Marker]) {
        let Some(rank) = self.ranks.last_mut() else {
            return;
        };
        for marker in markers {
            let first = match marker.name.as_str() {
                event::OOM => &mut rank.first_oom,
                event::NEAR_OOM => &mut rank.first_near_oom,
                event::OOM_FORECAST => &mut rank.first_forecast,
                _ => continue,
            };
            if first
                .as_ref()
                .is_none_or(|f| marker.unix_nanos < f.unix_nanos)
            {
                *first = Some(marker.clone());
            }
        }
    }

    /// `first out of memory: rank 3 at step 12 (2026-12-02 13:02:11.123 UTC); 2 of 4
    /// ranks ran out`, else the same of the near-OOM crossings; `None` when no rank had
    /// either. A job that timed out in a collective after one rank died shows the cause.
    pub fn first_out_of_memory(&self) -> Option<String> {
        let (what, pick): (&str, fn(&Rank) -> Option<&Marker>) =
            if self.ranks.iter().any(|r| r.first_oom.is_some()) {
                ("out of memory", |r| r.first_oom.as_ref())
            } else {
                ("near out of memory", |r| r.first_near_oom.as_ref())
            };
        let hit: Vec<(&str, &Marker)> = self
            .ranks
            .iter()
            .filter_map(|r| Some((r.name.as_str(), pick(r)?)))
            .collect();
        let (rank, first) = hit.iter().min_by_key(|(_, m)| m.unix_nanos)?;
        Some(format!(
            "first {what}: rank {rank} in {} ({}); {} of {} ranks",
            first.span,
            crate::util::time::utc_readable(first.unix_nanos),
            hit.len(),
            self.ranks.len()
        ))
    }

    /// `first OOM forecast: rank 2 in step 33, out of memory in about 887 steps on gpu 2
    /// (+64.0 MiB a step); 1 of 4 ranks`: the rank whose steps' peak was first forecast to
    /// reach its limit; `None` when no rank's was.
    pub fn first_forecast(&self) -> Option<String> {
        let hit: Vec<(&str, &Marker)> = self
            .ranks
            .iter()
            .filter_map(|r| Some((r.name.as_str(), r.first_forecast.as_ref()?)))
            .collect();
        let (rank, first) = hit.iter().min_by_key(|(_, m)| m.unix_nanos)?;
        let value = |key: &str| {
            let found = first.attributes.iter().find(|(k, _)| k == key);
            found.and_then(|(_, v)| v.parse::<i64>().ok())
        };
        let mut line = format!("first OOM forecast: rank {rank} in {}", first.span);
        if let Some(steps) = value(attr::GPU_MEMORY_FORECAST_STEPS) {
            let _ = write!(line, ", out of memory in about {steps} steps");
        }
        if let Some(index) = value(attr::GPU_INDEX) {
            let _ = write!(line, " on gpu {index}");
            if let Some(mig) = value(attr::GPU_MIG_INDEX) {
                let _ = write!(line, ".mig{mig}");
            }
        }
        if let Some(growth) = value(attr::GPU_MEMORY_FORECAST_GROWTH_PER_STEP) {
            let _ = write!(line, " (+{} a step)", human(growth));
        }
        let _ = write!(line, "; {} of {} ranks", hit.len(), self.ranks.len());
        Some(line)
    }

    /// The ranks, as added (`3` for `rank-3`).
    pub fn ranks(&self) -> Vec<&str> {
        self.ranks.iter().map(|r| r.name.as_str()).collect()
    }

    /// Every epoch all ranks ran, across the ranks.
    pub fn epochs(&self) -> BTreeMap<i64, JobRow> {
        self.shared(|rank| rank.epochs.clone())
    }

    /// Every step all ranks ran, across the ranks.
    pub fn steps(&self) -> BTreeMap<StepKey, JobRow> {
        self.shared(Rank::steps)
    }

    /// Each rank's steps, in the order of [`ranks`](Self::ranks).
    pub fn steps_by_rank(&self) -> Vec<BTreeMap<StepKey, RankFigures>> {
        self.ranks.iter().map(Rank::steps).collect()
    }

    /// The line on the steps every rank ran (see the table); `None` without any.
    pub fn steps_summary(&self) -> Option<String> {
        let steps = self.steps();
        (!steps.is_empty()).then(|| self.steps_line(&steps))
    }

    /// The job's table; `None` with fewer than two ranks.
    pub fn render(&self) -> Option<String> {
        if self.ranks.len() < 2 {
            return None;
        }
        let mut out = format!("job of {} ranks\n", self.ranks.len());
        let _ = writeln!(
            out,
            "{:>5}  {:>10}  {:>10}  {:>11}  {:>6}  {:>12}  {:>8}",
            "epoch", "worst rank", "worst peak", "lowest peak", "skew", "slowest rank", "slowest"
        );
        for (epoch, row) in &self.epochs() {
            let (worst_rank, worst_peak) = row
                .worst
                .as_ref()
                .map_or(("-".into(), "-".into()), |(r, p)| (r.clone(), human(*p)));
            let _ = writeln!(
                out,
                "{epoch:>5}  {worst_rank:>10}  {worst_peak:>10}  {:>11}  {:>6}  {:>12}  {:>8}",
                row.lowest.map_or("-".into(), human),
                percent(row.skew),
                row.slowest.0,
                format!("{:.2} s", row.slowest.1),
            );
        }
        if let Some(line) = self.steps_summary() {
            let _ = writeln!(out, "{line}");
        }
        out.push_str(&self.render_energy());
        for line in self.throttled_ranks() {
            let _ = writeln!(out, "{line}");
        }
        if let Some(line) = self.first_out_of_memory() {
            let _ = writeln!(out, "{line}");
        }
        if let Some(line) = self.first_forecast() {
            let _ = writeln!(out, "{line}");
        }
        Some(out)
    }

    /// The figures of every index (epoch or step) all ranks have, across the ranks.
    fn shared<K: Ord + Clone>(
        &self,
        of: impl Fn(&Rank) -> BTreeMap<K, RankFigures>,
    ) -> BTreeMap<K, JobRow> {
        let tables: Vec<BTreeMap<K, RankFigures>> = self.ranks.iter().map(&of).collect();
        let mut rows = BTreeMap::new();
        let Some(first) = tables.first() else {
            return rows;
        };
        for index in first.keys() {
            let figures: Option<Vec<(&str, RankFigures)>> = self
                .ranks
                .iter()
                .zip(&tables)
                .map(|(rank, table)| table.get(index).map(|f| (rank.name.as_str(), *f)))
                .collect();
            if let Some(figures) = figures {
                rows.insert(index.clone(), across(&figures));
            }
        }
        rows
    }

    /// `steps: 120 on every rank; the widest skew at step 57 (40.0 %, rank 3 at 14.0 GiB);
    /// the highest peak most often on rank 3 (100 of 120); the slowest most often rank 1
    /// (80 of 120)`.
    fn steps_line(&self, steps: &BTreeMap<StepKey, JobRow>) -> String {
        let mut line = format!("steps: {} on every rank", steps.len());
        let widest = steps
            .iter()
            .filter_map(|(step, row)| Some((*step, row.skew?, row.worst.as_ref()?)))
            .max_by(|a, b| a.1.total_cmp(&b.1).then(b.0.cmp(&a.0)));
        if let Some((step, skew, (rank, peak))) = widest {
            let step = step_label(step);
            let _ = write!(
                line,
                "; the widest skew at {step} ({}, rank {rank} at {})",
                percent(Some(skew)),
                human(*peak)
            );
        }
        let most = |pick: &dyn Fn(&JobRow) -> Option<String>| {
            let mut counts: BTreeMap<String, usize> = BTreeMap::new();
            for row in steps.values() {
                if let Some(rank) = pick(row) {
                    *counts.entry(rank).or_default() += 1;
                }
            }
            counts
                .into_iter()
                .max_by(|a, b| a.1.cmp(&b.1).then(b.0.cmp(&a.0)))
        };
        if let Some((rank, count)) = most(&|row| row.worst.as_ref().map(|(r, _)| r.clone())) {
            let _ = write!(
                line,
                "; the highest peak most often on rank {rank} ({count} of {})",
                steps.len()
            );
        }
        if let Some((rank, count)) = most(&|row| Some(row.slowest.0.clone())) {
            let _ = write!(
                line,
                "; the slowest most often rank {rank} ({count} of {})",
                steps.len()
            );
        }
        line
    }
}

/// One index's figures across the ranks: ties go to the rank listed first.
fn across(figures: &[(&str, RankFigures)]) -> JobRow {
    let peaks: Vec<(&str, i64)> = figures
        .iter()
        .filter_map(|(rank, f)| Some((*rank, f.peak?)))
        .collect();
    let worst = peaks
        .iter()
        .fold(None::<(&str, i64)>, |best, &(rank, peak)| match best {
            Some((_, top)) if top >= peak => best,
            _ => Some((rank, peak)),
        });
    let lowest = peaks.iter().map(|&(_, p)| p).min();
    let skew = match (worst, lowest) {
        (Some((_, high)), Some(low)) if peaks.len() > 1 && high > 0 => {
            Some((high - low) as f64 / high as f64)
        }
        _ => None,
    };
    let slowest = figures
        .iter()
        .fold(None::<(&str, f64)>, |best, &(rank, f)| match best {
            Some((_, top)) if top >= f.seconds => best,
            _ => Some((rank, f.seconds)),
        })
        .map_or((String::new(), 0.0), |(r, s)| (r.to_owned(), s));
    JobRow {
        worst: worst.map(|(r, p)| (r.to_owned(), p)),
        lowest,
        skew,
        slowest,
    }
}

/// `epoch 2 step 57`, or `step 57` for a step under no epoch.
pub fn step_label(key: StepKey) -> String {
    match key {
        (Some(epoch), step) => format!("epoch {epoch} step {step}"),
        (None, step) => format!("step {step}"),
    }
}

/// `40.0 %`, or `-` when there is no figure.
pub fn percent(value: Option<f64>) -> String {
    value.map_or("-".into(), |v| format!("{:.1} %", 100.0 * v))
}

mod energy;
pub use energy::{RankEnergy, SLOW_STEP};

#[cfg(test)]
mod tests;

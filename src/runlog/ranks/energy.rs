//! A job's energy and throttling: each rank's energy over its run and the job's sum, and a
//! throttled rank named as the likely cause of the other ranks' slow steps. In a job that
//! synchronises every step (a gradient all-reduce), a rank whose clocks are held down is
//! slow, and the others wait for it in the collective: their steps are as slow as its own
//! although their GPUs ran at full clock. Their own figures show slow steps and no
//! reason; the throttled rank's show the reason.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use super::{JobTable, Rank, StepKey};
use crate::runlog::throttle::Throttled;
use crate::util::energy::{joules, watts};

/// A step of a rank counts as slow at this many times its rank's median step.
pub const SLOW_STEP: f64 = 1.5;

/// One rank's energy over its run.
#[derive(Debug, Clone, PartialEq)]
pub struct RankEnergy {
    /// The rank (`3` for `rank-3`).
    pub rank: String,
    /// The sum of its epochs' `gpu.energy` (of its steps', in a run without epochs), in
    /// joules; `None` when none carries one.
    pub joules: Option<f64>,
    /// That energy over the same spans' wall time, in watts.
    pub watts: Option<f64>,
    /// Whether a figure of the sum was estimated from power readings.
    pub estimated: bool,
    /// Spans with no figure while others had one (a counter went back).
    pub missing: usize,
}

impl Rank {
    /// The rank's energy: its epochs', else its steps'.
    fn energy(&self) -> RankEnergy {
        let epochs: Vec<_> = self.epochs.values().copied().collect();
        let spans = if epochs.iter().any(|f| f.energy.is_some()) {
            epochs
        } else {
            self.steps.iter().map(|s| s.2).collect()
        };
        let with: Vec<_> = spans.iter().filter(|f| f.energy.is_some()).collect();
        let total: f64 = with.iter().filter_map(|f| f.energy).sum();
        let seconds: f64 = with.iter().map(|f| f.seconds).sum();
        RankEnergy {
            rank: self.name.clone(),
            joules: (!with.is_empty()).then_some(total),
            watts: (!with.is_empty() && seconds > 0.0).then(|| total / seconds),
            estimated: with.iter().any(|f| f.estimated),
            missing: if with.is_empty() {
                0
            } else {
                spans.len() - with.len()
            },
        }
    }

    /// The median of the rank's step times.
    fn median_step(&self) -> Option<f64> {
        let mut seconds: Vec<f64> = self.steps.iter().map(|s| s.2.seconds).collect();
        seconds.sort_by(f64::total_cmp);
        seconds.get(seconds.len() / 2).copied()
    }
}

impl JobTable {
    /// Each rank's energy, in the order of [`ranks`](Self::ranks).
    pub fn energy_by_rank(&self) -> Vec<RankEnergy> {
        self.ranks.iter().map(Rank::energy).collect()
    }

    /// The ranks' energy summed: the job's, in joules, and the ranks' mean power summed
    /// (they run at once); `None` when no rank has a figure.
    pub fn job_energy(&self) -> Option<(f64, f64)> {
        let ranks = self.energy_by_rank();
        let with: Vec<&RankEnergy> = ranks.iter().filter(|r| r.joules.is_some()).collect();
        if with.is_empty() {
            return None;
        }
        Some((
            with.iter().filter_map(|r| r.joules).sum(),
            with.iter().filter_map(|r| r.watts).sum(),
        ))
    }

    /// The energy table for a terminal: a line per rank, then the job's; empty when no
    /// rank has a figure.
    pub(super) fn render_energy(&self) -> String {
        let Some((total, power)) = self.job_energy() else {
            return String::new();
        };
        let ranks = self.energy_by_rank();
        let mut out = format!("{:>6}  {:>10}  {:>9}\n", "rank", "energy", "power");
        for rank in &ranks {
            let _ = writeln!(
                out,
                "{:>6}  {:>10}  {:>9}{}",
                rank.rank,
                energy_cell(rank),
                rank.watts.map_or("-".into(), watts),
                note(rank)
            );
        }
        let counted = ranks.iter().filter(|r| r.joules.is_some()).count();
        // A total with an estimate in it is itself one, as the rank's `~` says.
        let estimated = ranks.iter().any(|r| r.joules.is_some() && r.estimated);
        let _ = write!(
            out,
            "{:>6}  {:>10}  {:>9}",
            "job",
            format!("{}{}", if estimated { "~" } else { "" }, joules(total)),
            watts(power)
        );
        if counted < ranks.len() {
            let _ = write!(out, "  ({counted} of {} ranks)", ranks.len());
        }
        out.push('\n');
        out
    }

    /// A line per throttled rank: its throttled steps, their reasons and lowest clock, and,
    /// when the other ranks' steps were slow at the same steps, the rank named as the
    /// likely cause (they waited for it in the collective). Empty when no step of any rank
    /// carries a `gpu.throttled` event.
    pub fn throttled_ranks(&self) -> Vec<String> {
        let steps = self.steps_by_rank();
        let medians: Vec<Option<f64>> = self.ranks.iter().map(Rank::median_step).collect();
        let mut lines = Vec::new();
        for (r, rank) in self.ranks.iter().enumerate() {
            if rank.throttled.is_empty() {
                continue;
            }
            // Per epoch, so that a loop counting steps from 0 in each reads right.
            let mut by_epoch: BTreeMap<Option<i64>, Throttled> = BTreeMap::new();
            for (parent, step, figures) in &rank.throttled {
                by_epoch
                    .entry(rank.epoch_of(*parent))
                    .or_default()
                    .add(*step, figures);
            }
            let places: Vec<String> = by_epoch
                .iter()
                .map(|(epoch, throttled)| match epoch {
                    Some(e) => format!("epoch {e} {}", throttled.describe()),
                    None => throttled.describe(),
                })
                .collect();
            let mut line = format!("throttled: rank {} at {}", rank.name, places.join("; "));
            // The other ranks at the throttled steps: those not throttled there themselves,
            // and of them the slow ones, with their time over their own median.
            let mut waited = 0;
            let mut waiting = BTreeSet::new();
            let mut ratios = Vec::new();
            for (parent, step, _) in &rank.throttled {
                let key: StepKey = (rank.epoch_of(*parent), *step);
                let mut others = 0;
                let mut slow = Vec::new();
                for (o, other) in steps.iter().enumerate() {
                    let Some(figures) = other.get(&key).filter(|f| o != r && !f.throttled) else {
                        continue;
                    };
                    others += 1;
                    let Some(median) = medians[o].filter(|m| *m > 0.0) else {
                        continue;
                    };
                    if figures.seconds >= SLOW_STEP * median {
                        slow.push((o, figures.seconds / median));
                    }
                }
                if others > 0 && 2 * slow.len() >= others {
                    waited += 1;
                    for (o, ratio) in slow {
                        waiting.insert(o);
                        ratios.push(ratio);
                    }
                }
            }
            if waited > 0 {
                let mean = ratios.iter().sum::<f64>() / ratios.len() as f64;
                let _ = write!(
                    line,
                    ": the likely cause of the other ranks' slow steps there ({} of {} \
                     throttled steps; {} rank{} at {mean:.1}x their median step, waiting for \
                     it in the collective)",
                    waited,
                    rank.throttled.len(),
                    waiting.len(),
                    if waiting.len() == 1 { "" } else { "s" },
                );
            } else if self.ranks.len() > 1 {
                line.push_str("; the other ranks' steps there were not slow");
            }
            lines.push(line);
        }
        lines
    }
}

impl RankEnergy {
    /// `150.0 J`, `~1.2 J` for an estimate, `-` without a figure: the cell the job's
    /// table and page write.
    pub fn energy_text(&self) -> String {
        self.joules.map_or("-".into(), |j| {
            format!("{}{}", if self.estimated { "~" } else { "" }, joules(j))
        })
    }
}

fn energy_cell(rank: &RankEnergy) -> String {
    rank.energy_text()
}

/// `  (2 epochs without a figure)` after a rank whose sum leaves spans out.
fn note(rank: &RankEnergy) -> String {
    match rank.missing {
        0 => String::new(),
        n => format!(
            "  ({n} span{} without a figure)",
            if n == 1 { "" } else { "s" }
        ),
    }
}

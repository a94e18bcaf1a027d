//! Leak rules over a series of end-of-span memory figures: the classic ratio rule (end
//! memory against the first epoch's) and a robust trend rule (a Theil–Sen slope, tested
//! against the series' own noise), at each epoch end and over the steps of an epoch. Their
//! findings are the events `gpu.memory.leak_suspected`.

use opentelemetry::KeyValue;

use super::{Attributes, Counter, Detail, FindingKind, Setup, SpanRule};
use crate::diagnose::Findings;
use crate::names::{attribute as attr, event};
use crate::record::{Role, SpanRecord};
use crate::util::bytes;

/// Which rule found a leak; its name is the event's `gpu.memory.leak.rule`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LeakRule {
    /// End memory reached `ratio` times the first epoch's.
    Ratio,
    /// End memory of the last epochs grows steadily.
    Trend,
    /// End memory of the steps inside one epoch grows steadily.
    StepTrend,
}

impl LeakRule {
    /// Every rule's name, in the order of the enum (the counter's split).
    const NAMES: [&'static str; 3] = ["ratio", "trend", "step_trend"];

    pub(crate) fn name(self) -> &'static str {
        Self::NAMES[self as usize]
    }
}

/// The kind of finding: a suspected leak.
pub(crate) struct LeakSuspected;

pub(super) const KIND: &dyn FindingKind = &LeakSuspected;

impl FindingKind for LeakSuspected {
    fn event(&self) -> &'static str {
        event::LEAK_SUSPECTED
    }

    fn counter(&self) -> Counter {
        Counter {
            description: "Memory leaks suspected, by rule",
            split: Some((attr::GPU_MEMORY_LEAK_RULE, &LeakRule::NAMES)),
        }
    }

    /// `leak? trend +1.0 GiB/epoch` live; `leak? trend` read back.
    fn mark(&self, event: &dyn Attributes, detail: Detail) -> String {
        let rule = event.text(attr::GPU_MEMORY_LEAK_RULE).unwrap_or("?");
        match (detail, growth(event)) {
            (Detail::Live, Some((growth, unit))) => {
                format!("leak? {rule} +{}/{unit}", bytes::human(growth))
            }
            _ => format!("leak? {rule}"),
        }
    }

    fn warning(&self, event: &dyn Attributes, record: &SpanRecord) -> Option<String> {
        let epoch = match record.role {
            Role::Epoch(epoch) => epoch,
            _ => -1,
        };
        let (growth, unit) = growth(event)?;
        let figure = |key| bytes::human(event.int(key).unwrap_or_default());
        Some(format!(
            "memory leak suspected at epoch {epoch}: end memory grows by {}/{unit} ({} to {} \
             over {} {unit}s, {} rule)",
            bytes::human(growth),
            figure(attr::GPU_MEMORY_LEAK_FIRST),
            figure(attr::GPU_MEMORY_LEAK_LAST),
            event.int(attr::GPU_MEMORY_LEAK_POINTS).unwrap_or_default(),
            event.text(attr::GPU_MEMORY_LEAK_RULE).unwrap_or("?"),
        ))
    }

    fn start(&self, setup: &Setup<'_>) -> Option<Box<dyn SpanRule>> {
        Some(Box::new(LeakDetector::new(
            setup.settings.leak_ratio,
            setup.settings.leak_warmup,
        )))
    }
}

/// A finding's growth and what it is per (`epoch`, or `step` for the step rule).
fn growth(event: &dyn Attributes) -> Option<(i64, &'static str)> {
    event
        .int(attr::GPU_MEMORY_LEAK_GROWTH_PER_STEP)
        .map(|g| (g, "step"))
        .or_else(|| {
            event
                .int(attr::GPU_MEMORY_LEAK_GROWTH_PER_EPOCH)
                .map(|g| (g, "epoch"))
        })
}

impl SpanRule for LeakDetector {
    fn on_span(&mut self, record: &SpanRecord, _: &mut Findings) -> Vec<Vec<KeyValue>> {
        let end = record.gpu.map(|m| m.end);
        let found = match record.role {
            Role::Step(_) => {
                self.on_step(end);
                Vec::new()
            }
            Role::Epoch(_) => self.on_epoch(end),
            Role::Other => Vec::new(),
        };
        found.iter().map(LeakFinding::attributes).collect()
    }
}

impl LeakFinding {
    /// The event's attributes.
    fn attributes(&self) -> Vec<KeyValue> {
        let growth_key = match self.rule {
            LeakRule::StepTrend => attr::GPU_MEMORY_LEAK_GROWTH_PER_STEP,
            _ => attr::GPU_MEMORY_LEAK_GROWTH_PER_EPOCH,
        };
        vec![
            KeyValue::new(attr::GPU_MEMORY_LEAK_RULE, self.rule.name()),
            KeyValue::new(growth_key, self.growth),
            KeyValue::new(attr::GPU_MEMORY_LEAK_FIRST, self.first),
            KeyValue::new(attr::GPU_MEMORY_LEAK_LAST, self.last),
            KeyValue::new(attr::GPU_MEMORY_LEAK_POINTS, self.points as i64),
        ]
    }
}

/// One finding: growth per epoch (or per step, for [`LeakRule::StepTrend`]), with the
/// first and last figures the rule compared.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct LeakFinding {
    pub(crate) rule: LeakRule,
    /// Bytes per epoch (per step for the step rule).
    pub(crate) growth: i64,
    pub(crate) first: i64,
    pub(crate) last: i64,
    /// How many figures the rule looked at.
    pub(crate) points: usize,
}

/// The ends a trend rule looks back over, and the fewest it needs.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Window {
    pub(crate) span: usize,
    pub(crate) fewest: usize,
}

/// The trend rule over epoch ends, and the step rule over the steps of an epoch.
const EPOCHS: Window = Window {
    span: 10,
    fewest: 6,
};
const STEPS: Window = Window {
    span: 200,
    fewest: 8,
};
/// Epoch ends kept for the trend rule's noise figure.
const EPOCH_HISTORY: usize = 1000;
/// The slope must stand this many standard errors above zero...
const SIGNIFICANCE: f64 = 3.0;
/// ...and add up to at least this fraction of the level over the window (5 %: a 1 %
/// per epoch leak passes after six epochs), so that noise in a short window and a clear
/// but negligible drift (allocator rounding) are not leaks.
const MIN_GROWTH: f64 = 0.05;

/// Follows one run's spans as they close and applies the rules.
#[derive(Debug)]
pub(crate) struct LeakDetector {
    ratio: f64,
    warmup: usize,
    epochs_seen: usize,
    /// End figures of the epochs after warm-up.
    epochs: Vec<i64>,
    /// End figures of the current epoch's steps, and how many of its steps were seen.
    steps: Vec<i64>,
    steps_seen: usize,
    fired: [bool; 3],
}

impl LeakDetector {
    pub(crate) fn new(ratio: f64, warmup: usize) -> Self {
        Self {
            ratio,
            warmup,
            epochs_seen: 0,
            epochs: Vec::new(),
            steps: Vec::new(),
            steps_seen: 0,
            fired: [false; 3],
        }
    }

    /// A step closed with `end` bytes in use.
    pub(crate) fn on_step(&mut self, end: Option<i64>) {
        self.steps_seen += 1;
        let warm = self.epochs_seen >= self.warmup && self.steps_seen > self.warmup;
        if let (true, Some(end)) = (warm, end) {
            if self.steps.len() == STEPS.span {
                self.steps.remove(0);
            }
            self.steps.push(end);
        }
    }

    /// An epoch closed with `end` bytes in use: the findings of the rules that fire now.
    /// Each rule fires once per run.
    pub(crate) fn on_epoch(&mut self, end: Option<i64>) -> Vec<LeakFinding> {
        let mut findings = Vec::new();
        let steps = std::mem::take(&mut self.steps);
        self.steps_seen = 0;
        let warm = self.epochs_seen >= self.warmup;
        self.epochs_seen += 1;
        if !warm {
            return findings;
        }
        if let Some(finding) = trend(&steps, STEPS, LeakRule::StepTrend) {
            findings.push(finding);
        }
        if let Some(end) = end {
            if self.epochs.len() == EPOCH_HISTORY {
                self.epochs.remove(1);
            }
            self.epochs.push(end);
            let first = self.epochs[0];
            if first > 0 && end as f64 >= self.ratio * first as f64 {
                let epochs = (self.epochs.len() - 1).max(1) as i64;
                findings.push(LeakFinding {
                    rule: LeakRule::Ratio,
                    growth: (end - first) / epochs,
                    first,
                    last: end,
                    points: self.epochs.len(),
                });
            }
            findings.extend(trend(&self.epochs, EPOCHS, LeakRule::Trend));
        }
        findings.retain(|f| {
            let slot = &mut self.fired[f.rule as usize];
            !std::mem::replace(slot, true)
        });
        findings
    }
}

/// The trend rule over the last `window.span` figures of `history`: a Theil–Sen slope that
/// stands `SIGNIFICANCE` standard errors above zero and adds up to `MIN_GROWTH` of the
/// level over the window. The noise is the larger of the residuals' spread around the
/// line and the spread of successive differences over the whole history, so that a short
/// window that happens to sit close to its line does not pass for a quiet series.
pub(crate) fn trend(history: &[i64], window: Window, rule: LeakRule) -> Option<LeakFinding> {
    let series = &history[history.len().saturating_sub(window.span)..];
    let n = series.len();
    if n < window.fewest.max(3) {
        return None;
    }
    let y: Vec<f64> = series.iter().map(|&v| v as f64).collect();
    let mut slopes = Vec::with_capacity(n * (n - 1) / 2);
    for i in 0..n {
        for j in i + 1..n {
            slopes.push((y[j] - y[i]) / (j - i) as f64);
        }
    }
    let slope = median(&mut slopes);
    if slope <= 0.0 {
        return None;
    }
    let mut offsets: Vec<f64> = y
        .iter()
        .enumerate()
        .map(|(i, v)| v - slope * i as f64)
        .collect();
    let intercept = median(&mut offsets);
    let residual_sd = (y
        .iter()
        .enumerate()
        .map(|(i, v)| (v - intercept - slope * i as f64).powi(2))
        .sum::<f64>()
        / (n - 2) as f64)
        .sqrt();
    let diffs: Vec<f64> = history.windows(2).map(|w| (w[1] - w[0]) as f64).collect();
    let mean_diff = diffs.iter().sum::<f64>() / diffs.len() as f64;
    let diff_sd = (diffs.iter().map(|d| (d - mean_diff).powi(2)).sum::<f64>()
        / (diffs.len() - 1).max(1) as f64)
        .sqrt()
        / 2f64.sqrt();
    let sigma = residual_sd.max(diff_sd);
    let mean_x = (n - 1) as f64 / 2.0;
    let spread: f64 = (0..n).map(|i| (i as f64 - mean_x).powi(2)).sum();
    let standard_error = sigma / spread.sqrt();
    let mut levels = y.clone();
    let level = median(&mut levels).abs();
    let growth = slope * (n - 1) as f64;
    (slope > SIGNIFICANCE * standard_error && growth >= MIN_GROWTH * level).then(|| LeakFinding {
        rule,
        growth: slope.round() as i64,
        first: series[0],
        last: series[n - 1],
        points: n,
    })
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n == 0 {
        0.0
    } else if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    const GIB: f64 = (1u64 << 30) as f64;

    /// Uniform noise in [-1, 1] from a fixed seed (a 64-bit LCG), so runs repeat.
    pub(crate) struct Noise(u64);

    impl Noise {
        pub(crate) fn new(seed: u64) -> Self {
            Self(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
        }

        pub(crate) fn next(&mut self) -> f64 {
            self.0 = self
                .0
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            (self.0 >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0
        }
    }

    /// Feeds `epochs` epochs of `steps` steps; returns the epochs (index, finding) flagged.
    fn run(epoch_end: impl Fn(usize) -> f64, epochs: usize) -> Vec<(usize, LeakFinding)> {
        let mut detector = LeakDetector::new(1.5, 1);
        let mut flagged = Vec::new();
        for epoch in 0..epochs {
            let end = epoch_end(epoch) as i64;
            for _ in 0..20 {
                detector.on_step(Some(end));
            }
            for finding in detector.on_epoch(Some(end)) {
                flagged.push((epoch, finding));
            }
        }
        flagged
    }

    #[test]
    fn a_steady_run_with_two_percent_noise_is_never_flagged() {
        for seed in 0..200 {
            let noise = std::cell::RefCell::new(Noise::new(seed));
            let flagged = run(
                |_| 10.0 * GIB * (1.0 + 0.02 * noise.borrow_mut().next()),
                50,
            );
            assert_eq!(flagged, vec![], "seed {seed}");
        }
    }

    #[test]
    fn a_one_percent_per_epoch_leak_is_flagged_within_ten_epochs() {
        for seed in 0..200 {
            let noise = std::cell::RefCell::new(Noise::new(seed));
            let flagged = run(
                |e| 10.0 * GIB * (1.0 + 0.01 * e as f64 + 0.02 * noise.borrow_mut().next()),
                11,
            );
            // Epoch 0 is warm-up: flagged within the ten epochs after it.
            let (epoch, finding) = flagged.first().copied().expect("flagged");
            assert!(epoch <= 10, "seed {seed}: epoch {epoch}");
            assert_eq!(finding.rule, LeakRule::Trend);
            // About 1 % of 10 GiB per epoch (estimated from as few as six noisy epochs).
            let per_epoch = finding.growth as f64 / (0.01 * 10.0 * GIB);
            assert!((0.4..2.0).contains(&per_epoch), "seed {seed}: {per_epoch}");
        }
    }

    #[test]
    fn the_ratio_rule_compares_with_the_first_epoch_after_warm_up() {
        // Warm-up epoch 0 is low (allocator not yet grown): not the reference.
        let ends = [2.0, 4.0, 4.0, 4.0, 6.0, 6.0];
        let flagged = run(|e| ends[e] * GIB, ends.len());
        let ratio: Vec<_> = flagged
            .iter()
            .filter(|(_, f)| f.rule == LeakRule::Ratio)
            .collect();
        assert_eq!(ratio.len(), 1);
        let (epoch, finding) = ratio[0];
        assert_eq!(*epoch, 4);
        assert_eq!(finding.first, (4.0 * GIB) as i64);
        assert_eq!(finding.last, (6.0 * GIB) as i64);
        assert_eq!(finding.growth, (2.0 * GIB / 3.0) as i64);
    }

    #[test]
    fn growth_inside_an_epoch_is_flagged_by_the_step_rule() {
        let mut detector = LeakDetector::new(1.5, 1);
        for _ in 0..20 {
            detector.on_step(Some(1 << 30));
        }
        assert_eq!(detector.on_epoch(Some(1 << 30)), vec![]);
        for step in 0..40 {
            detector.on_step(Some((1 << 30) + step * (4 << 20)));
        }
        let findings = detector.on_epoch(Some(1 << 30));
        assert_eq!(findings.len(), 1);
        assert_eq!(findings[0].rule, LeakRule::StepTrend);
        assert_eq!(findings[0].growth, 4 << 20);
        // The first step of the epoch is warm-up.
        assert_eq!(findings[0].first, (1 << 30) + (4 << 20));
        assert_eq!(findings[0].points, 39);
    }

    #[test]
    fn a_flat_or_shrinking_series_has_no_trend() {
        assert_eq!(trend(&[5; 10], EPOCHS, LeakRule::Trend), None);
        let shrinking: Vec<i64> = (0..10).map(|i| 1000 - i * 10).collect();
        assert_eq!(trend(&shrinking, EPOCHS, LeakRule::Trend), None);
        assert_eq!(trend(&[1, 2], EPOCHS, LeakRule::Trend), None);
    }
}

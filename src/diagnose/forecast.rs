//! The OOM forecast's arithmetic: from the peaks of the steps so far and the limit they run
//! toward, whether the steps' peak grows steadily enough to reach the limit, and in how
//! many steps. Plain figures: the rule (`rules/oom_forecast.rs`) feeds it one step at a
//! time, on the export thread.
//!
//! A forecast that cries wolf is worse than none, so one holds only when all of these hold
//! over a window of the latest steps (all of them up to [`MAX_WINDOW`], or the latest half,
//! quarter... of those, down to [`MIN_WINDOW`]: longer than a sawtooth's rise or a
//! warm-up's climb):
//! - **a trend**: the Theil–Sen slope over the medians of [`BLOCKS`] blocks of the window
//!   is positive. Medians, and the median of the slopes between them, so that an
//!   evaluation spike or a few odd steps move neither;
//! - **steady, not levelling off**: the slope of the window's later half is at least
//!   [`STEADY`] times its earlier half's (a caching allocator's growth slows as it fills);
//! - **above the noise**: the rise over the window is [`SIGNIFICANCE`] times the spread of
//!   the steps around the line (a sawtooth's swing is spread, not trend);
//! - **new highs**: the trend's level now is above every block of the window and of the
//!   history before it (a sawtooth's next rise climbs only as high as the last one did);
//! - **near enough to believe**: the limit is reached within [`HORIZON`] times the
//!   window's length, since a line is not extrapolated far past the steps it was fitted to.
//!
//! The limits are tried in order, the first above the trend's level counting: the budget (or
//! the device's total, where that is lower), then the device's total, so a run already past
//! its budget is still forecast to reach the device's own end.
//!
//! The first [`WARMUP`] steps of a run are never fitted: the allocator's first growth, the
//! optimizer's state and cuDNN's autotuning happen there.

use std::collections::VecDeque;

/// Steps at the start of a run never fitted.
pub(crate) const WARMUP: usize = 10;
/// The fewest steps a forecast is fitted to.
pub(crate) const MIN_WINDOW: usize = 128;
/// The most steps a forecast is fitted to.
pub(crate) const MAX_WINDOW: usize = 2048;
/// Steps kept: the longest window and as much history before it, for the new-highs test.
const HISTORY: usize = 2 * MAX_WINDOW;
/// Blocks a window is cut into; each is represented by its median.
pub(crate) const BLOCKS: usize = 16;
/// The later half's slope against the earlier half's, at least.
pub(crate) const STEADY: f64 = 0.5;
/// The rise over the window against the steps' spread around the line, at least.
pub(crate) const SIGNIFICANCE: f64 = 8.0;
/// How far ahead a forecast may reach, in windows.
pub(crate) const HORIZON: f64 = 4.0;
/// Steps without the forecast holding after which the next time it holds is a new
/// crossing (a forecast that flickers on one noisy step is one forecast).
pub(crate) const REARM: usize = 16;

/// A forecast that holds: the limit is reached in about `steps` steps.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Forecast {
    /// Steps from the latest until the steps' peak reaches the limit.
    pub(crate) steps: u64,
    /// Growth of the steps' peak per step, in bytes.
    pub(crate) growth_per_step: i64,
    /// The trend's level at the latest step, in bytes.
    pub(crate) level: i64,
    /// The limit forecast against, in bytes.
    pub(crate) limit: i64,
    /// How many steps the trend was fitted to.
    pub(crate) window: usize,
}

impl Forecast {
    /// Bytes left between the trend's level now and the limit.
    pub(crate) fn headroom(&self) -> i64 {
        self.limit - self.level
    }
}

/// One device's steps over a run, and whether a forecast holds.
#[derive(Debug, Default)]
pub(crate) struct Forecaster {
    seen: usize,
    peaks: VecDeque<i64>,
    /// The highest limit a forecast held against, while one holds.
    holding: Option<i64>,
    /// Steps in a row without the forecast holding, while `holding`.
    quiet: usize,
}

impl Forecaster {
    /// A step closed with `peak` bytes (`None`: not measured), toward the first of `limits`
    /// (bytes, lowest first) above the trend: the forecast on the step where it starts to
    /// hold, once per crossing, and again when it moves on to a higher limit.
    pub(crate) fn on_step(&mut self, peak: Option<i64>, limits: &[i64]) -> Option<Forecast> {
        self.seen += 1;
        let peak = peak.filter(|_| self.seen > WARMUP)?;
        if self.peaks.len() == HISTORY {
            self.peaks.pop_front();
        }
        self.peaks.push_back(peak);
        match assess(self.peaks.make_contiguous(), limits) {
            Some(forecast) => {
                self.quiet = 0;
                let new = self.holding.is_none_or(|held| forecast.limit > held);
                self.holding = self.holding.max(Some(forecast.limit));
                new.then_some(forecast)
            }
            None => {
                if self.holding.is_some() {
                    self.quiet += 1;
                    if self.quiet >= REARM {
                        self.holding = None;
                        self.quiet = 0;
                    }
                }
                None
            }
        }
    }
}

/// Whether a forecast holds over `peaks` (oldest first) toward the first of `limits` above
/// the trend: the longest window it holds over, or `None`.
pub(crate) fn assess(peaks: &[i64], limits: &[i64]) -> Option<Forecast> {
    let mut window = peaks.len().min(MAX_WINDOW);
    while window >= MIN_WINDOW {
        if let Some(forecast) = assess_window(peaks, window, limits) {
            return Some(forecast);
        }
        window /= 2;
    }
    None
}

/// The tests of the module's header over the latest `window` of `peaks`.
fn assess_window(peaks: &[i64], window: usize, limits: &[i64]) -> Option<Forecast> {
    let size = window / BLOCKS;
    let used = size * BLOCKS;
    let start = peaks.len() - used;
    let series = &peaks[start..];
    let mut scratch = Vec::with_capacity(size);
    let blocks: Vec<(f64, f64)> = series
        .chunks_exact(size)
        .enumerate()
        .map(|(b, chunk)| {
            let x = (b * size) as f64 + (size - 1) as f64 / 2.0;
            (x, block_median(chunk, &mut scratch))
        })
        .collect();
    let slope = theil_sen(&blocks);
    if slope <= 0.0 {
        return None;
    }
    let (early, late) = blocks.split_at(BLOCKS / 2);
    let late_slope = theil_sen(late);
    if late_slope <= 0.0 || late_slope < STEADY * theil_sen(early) {
        return None;
    }
    let mut offsets: Vec<f64> = blocks.iter().map(|(x, m)| m - slope * x).collect();
    let intercept = median(&mut offsets);
    let level = intercept + slope * (used - 1) as f64;
    let limit = limits.iter().copied().find(|&limit| limit as f64 > level)?;
    let headroom = limit as f64 - level;
    let steps = (headroom / slope).ceil();
    if steps > HORIZON * used as f64 {
        return None;
    }
    if blocks.iter().any(|&(_, m)| m > level) {
        return None;
    }
    let mut residuals: Vec<f64> = series
        .iter()
        .enumerate()
        .map(|(i, &v)| v as f64 - (intercept + slope * i as f64))
        .collect();
    let centre = median(&mut residuals);
    let mut deviations: Vec<f64> = residuals.iter().map(|r| (r - centre).abs()).collect();
    let spread = 1.4826 * median(&mut deviations);
    if slope * used as f64 <= SIGNIFICANCE * spread {
        return None;
    }
    let before = &peaks[..start];
    let prior_high = before
        .rchunks(size)
        .map(|chunk| block_median(chunk, &mut scratch))
        .fold(f64::NEG_INFINITY, f64::max);
    if prior_high >= level {
        return None;
    }
    Some(Forecast {
        steps: steps as u64,
        growth_per_step: slope.round() as i64,
        level: level.round() as i64,
        limit,
        window: used,
    })
}

/// The median of `chunk`, sorted in `scratch`.
fn block_median(chunk: &[i64], scratch: &mut Vec<f64>) -> f64 {
    scratch.clear();
    scratch.extend(chunk.iter().map(|&v| v as f64));
    median(scratch)
}

/// The median of the slopes between every two of `points`.
fn theil_sen(points: &[(f64, f64)]) -> f64 {
    let mut slopes = Vec::with_capacity(points.len() * points.len() / 2);
    for (i, &(xi, yi)) in points.iter().enumerate() {
        for &(xj, yj) in &points[i + 1..] {
            slopes.push((yj - yi) / (xj - xi));
        }
    }
    median(&mut slopes)
}

/// The median of `values` (reordered), in linear time: a step's work stays small.
fn median(values: &mut [f64]) -> f64 {
    let n = values.len();
    if n == 0 {
        return 0.0;
    }
    let (below, middle, _) = values.select_nth_unstable_by(n / 2, f64::total_cmp);
    let upper = *middle;
    if n % 2 == 1 {
        return upper;
    }
    let lower = below.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (lower + upper) / 2.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diagnose::rules::Noise;

    const MIB: f64 = (1u64 << 20) as f64;
    const GIB: f64 = (1u64 << 30) as f64;
    const LIMIT: i64 = 80 << 30;

    /// Every forecast a run of `steps` steps whose step `s` peaks at `peak(s)` gets, with
    /// the step it came on.
    fn forecasts(steps: usize, mut peak: impl FnMut(usize) -> f64) -> Vec<(usize, Forecast)> {
        let mut forecaster = Forecaster::default();
        (0..steps)
            .filter_map(|s| Some((s, forecaster.on_step(Some(peak(s) as i64), &[LIMIT])?)))
            .collect()
    }

    #[test]
    fn a_ramp_of_64_mib_a_step_is_forecast_to_the_step_before_a_quarter_of_the_headroom_is_used() {
        let start = 10.0 * GIB;
        let growth = 64.0 * MIB;
        let peak = |s: usize| start + growth * s as f64;
        // The first step whose peak is over the limit.
        let truth = ((LIMIT as f64 - start) / growth).floor() as usize + 1;
        let quarter = ((LIMIT as f64 - start) / 4.0 / growth) as usize;
        let found = forecasts(truth, peak);
        assert_eq!(found.len(), 1, "{found:?}");
        let (step, forecast) = found[0];
        assert!(
            step <= quarter,
            "forecast at step {step}, a quarter is {quarter}"
        );
        let forecast_oom = step + forecast.steps as usize;
        assert!(
            forecast_oom.abs_diff(truth) <= 1,
            "forecast step {forecast_oom}, truth {truth}"
        );
        assert_eq!(forecast.growth_per_step, growth as i64);
        assert_eq!(forecast.limit, LIMIT);
        assert_eq!(forecast.level, peak(step) as i64);
    }

    #[test]
    fn a_noisy_ramp_is_forecast_within_a_step_on_every_seed() {
        for seed in 0..20 {
            let mut noise = Noise::new(seed);
            let start = 10.0 * GIB;
            let growth = 64.0 * MIB;
            let truth = ((LIMIT as f64 - start) / growth).floor() as usize + 1;
            let quarter = ((LIMIT as f64 - start) / 4.0 / growth) as usize;
            // ±32 MiB of noise from step to step: half a step's growth.
            let found = forecasts(truth, |s| {
                start + growth * s as f64 + 32.0 * MIB * noise.next()
            });
            let (step, forecast) = found[0];
            assert!(step <= quarter, "seed {seed}: step {step}");
            // Half a step's growth of noise moves the fitted line a little: within three
            // steps of some 850.
            let oom = step + forecast.steps as usize;
            assert!(
                oom.abs_diff(truth) <= 3,
                "seed {seed}: {oom} against {truth}"
            );
        }
    }

    /// A run's peak at each step.
    type Peaks = Box<dyn FnMut(usize) -> f64>;

    /// Shapes of runs that do not run out of memory, each close to the limit, with the
    /// name a failure prints.
    fn calm_runs(seed: u64) -> Vec<(String, Peaks)> {
        let mut runs: Vec<(String, Peaks)> = Vec::new();
        let mut noise = Noise::new(seed);
        let mut jitter = move || noise.next();
        let top = 74.0 * GIB;
        // The allocator's sawtooth: gradient accumulation, a cache emptied now and then.
        for period in [2, 3, 4, 8, 16, 32, 50] {
            for swing in [1.0, 4.0, 12.0] {
                let phase = (jitter().abs() * period as f64) as usize;
                runs.push((
                    format!("sawtooth period {period} swing {swing} GiB"),
                    Box::new(move |s| {
                        let at = ((s + phase) % period) as f64 / period as f64;
                        top - swing * GIB * (1.0 - at)
                    }),
                ));
            }
        }
        // Caching-allocator growth that levels off toward the top.
        for tau in [3.0, 10.0, 20.0, 30.0] {
            runs.push((
                format!("growth levelling off, time constant {tau} steps"),
                Box::new(move |s| top - 30.0 * GIB * (-(s as f64) / tau).exp()),
            ));
        }
        // The largest batch so far sets the pool: new records, ever more rarely.
        let mut records = Noise::new(seed ^ 0xABCD);
        let mut largest = 0.0f64;
        runs.push((
            "pool set by the longest batch so far".to_owned(),
            Box::new(move |_| {
                largest = largest.max(records.next().abs());
                top - 20.0 * GIB * (1.0 - largest.powi(8))
            }),
        ));
        // A first epoch's warm-up: optimizer state at step 1, autotuning spikes.
        runs.push((
            "first epoch warm-up".to_owned(),
            Box::new(move |s| match s {
                0 => 40.0 * GIB,
                1..=20 if s % 3 == 0 => top + 4.0 * GIB,
                1..=100 => top - 10.0 * GIB + 10.0 * GIB * s as f64 / 100.0,
                _ => top,
            }),
        ));
        // Evaluation every 100 steps: a spike for one to three steps.
        for (every, long, height) in [(100, 1, 5.0), (50, 3, 5.5), (200, 2, 2.0)] {
            runs.push((
                format!("evaluation every {every} steps, {long} long, +{height} GiB"),
                Box::new(move |s| {
                    if s % every < long {
                        top + height * GIB
                    } else {
                        top
                    }
                }),
            ));
        }
        // Noise: ±2 % of the level from step to step.
        runs.push((
            "steady with 2 % noise".to_owned(),
            Box::new(move |_| top * (1.0 + 0.02 * jitter())),
        ));
        runs
    }

    #[test]
    fn no_calm_run_is_forecast_to_run_out_of_memory() {
        let mut false_forecasts = Vec::new();
        let mut runs = 0;
        for seed in 0..2 {
            for (name, peak) in calm_runs(seed) {
                runs += 1;
                let found = forecasts(1200, peak);
                if let Some((step, forecast)) = found.first() {
                    false_forecasts
                        .push(format!("{name} (seed {seed}): step {step}, {forecast:?}"));
                }
            }
        }
        assert!(
            false_forecasts.is_empty(),
            "{} of {runs}:\n{}",
            false_forecasts.len(),
            false_forecasts.join("\n")
        );
    }

    #[test]
    fn a_ramp_that_stops_and_starts_again_is_forecast_once_per_crossing() {
        let start = 10.0 * GIB;
        let growth = 64.0 * MIB;
        // Up for 250 steps, flat for 100 (the forecast stops holding), then up again.
        let peak = |s: usize| match s {
            0..250 => start + growth * s as f64,
            250..350 => start + growth * 250.0,
            _ => start + growth * (s - 100) as f64,
        };
        let found: Vec<usize> = forecasts(800, peak).iter().map(|(s, _)| *s).collect();
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(found[0] < 250 && found[1] > 350, "{found:?}");
    }

    /// Peaks and limits at the ends of the range: `u64::MAX` readings arrive saturated at
    /// `i64::MAX`, a device may read 0 used or 0 total. Each gives a sane forecast or none,
    /// and the steps kept stay bounded however long the run.
    #[test]
    fn peaks_and_limits_at_the_ends_of_the_range_give_a_sane_forecast_or_none() {
        type Peak = Box<dyn Fn(i64) -> i64>;
        let top = i64::MAX;
        let steps = 4500;
        let cases: Vec<(&str, Peak, i64, usize)> = vec![
            ("zero peaks", Box::new(|_| 0), LIMIT, 0),
            ("saturated peaks", Box::new(move |_| top), top, 0),
            (
                "zeros and saturated peaks in turn",
                Box::new(move |s| if s % 2 == 0 { 0 } else { top }),
                top,
                0,
            ),
            ("a ramp toward a limit of 0", Box::new(|s| s << 26), 0, 0),
            ("a falling ramp", Box::new(|s| LIMIT - (s << 23)), LIMIT, 0),
            (
                "a ramp at the top of the range",
                Box::new(move |s| top - ((steps - s) << 40)),
                top,
                1,
            ),
        ];
        for (name, peak, limit, expected) in cases {
            let mut forecaster = Forecaster::default();
            let mut found = 0;
            for s in 0..steps {
                if let Some(f) = forecaster.on_step(Some(peak(s)), &[limit]) {
                    found += 1;
                    assert!(
                        f.steps >= 1 && f.growth_per_step > 0 && (0..=limit).contains(&f.level),
                        "{name}: {f:?}"
                    );
                }
            }
            assert_eq!(found, expected, "{name}");
            assert!(forecaster.peaks.len() <= HISTORY, "{name}");
        }
    }
}

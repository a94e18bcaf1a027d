//! The interval device memory is read at: the one asked for, unless reading every device
//! once takes more than half of it. The interval then widens to twice that cost, so the
//! reads keep half the sampler's time free and the ticks stay regular; gpuspan says so
//! once on stderr and the spans carry `gpu.memory.resolution`. Owned by the sampler thread.

use std::time::Duration;

use super::cost::Cost;
use super::SamplerStats;

/// Widened intervals are whole multiples of this.
const GRAIN: Duration = Duration::from_micros(100);

/// A run is judged on its cadence once it had this many ticks to keep.
const JUDGED_AFTER: u64 = 200;
/// More missed ticks than this share of the scheduled ones is a cadence worse than asked.
const MISSED_SHARE: f64 = 0.05;

#[derive(Debug)]
pub(super) struct Cadence {
    asked: Duration,
    effective: Duration,
    /// What reading every device's memory once costs.
    round: Cost,
    warned: bool,
}

/// The interval to keep when one round of memory reads costs `round`.
pub(super) fn interval_for(asked: Duration, round: Duration) -> Duration {
    let needed = round * 2;
    if needed <= asked {
        return asked;
    }
    let grains = needed.as_nanos().div_ceil(GRAIN.as_nanos());
    GRAIN * u32::try_from(grains).unwrap_or(u32::MAX)
}

impl Cadence {
    pub(super) fn new(asked: Duration) -> Self {
        Self {
            asked,
            effective: asked,
            round: Cost::default(),
            warned: false,
        }
    }

    /// The interval in effect.
    pub(super) fn interval(&self) -> Duration {
        self.effective
    }

    /// What one round of memory reads costs, as planned with.
    pub(super) fn round_cost(&self) -> Duration {
        self.round.get()
    }

    /// The interval in effect when it is wider than asked.
    pub(super) fn widened(&self) -> Option<Duration> {
        (self.effective > self.asked).then_some(self.effective)
    }

    /// Takes one round's cost into account; says once when the interval widens.
    pub(super) fn after_round(&mut self, took: Duration, devices: usize) {
        self.round.record(took);
        self.effective = interval_for(self.asked, self.round.get());
        if self.effective > self.asked && !self.warned {
            self.warned = true;
            eprintln!(
                "gpuspan: warning: reading the memory of {devices} device(s) takes {:?} per \
                 round, too slow for the {:?} sampling interval; device memory is read every \
                 {:?} instead, and spans say so in gpu.memory.resolution",
                self.round.get(),
                self.asked,
                self.effective
            );
        }
    }
}

/// The line gpuspan prints at shutdown when the sampler kept a cadence worse than asked.
pub(super) fn shutdown_line(stats: &SamplerStats) -> Option<String> {
    let scheduled = stats.samples + stats.missed_ticks;
    let missed_many =
        scheduled >= JUDGED_AFTER && stats.missed_ticks as f64 > scheduled as f64 * MISSED_SHARE;
    let widened = stats.widened_interval.is_some();
    if !missed_many && !widened {
        return None;
    }
    let kept = 100.0 * stats.samples as f64 / scheduled.max(1) as f64;
    Some(format!(
        "gpuspan: the sampler read device memory every {:?} on average (asked {:?}), kept \
         {kept:.1} % of its ticks, and its longest gap was {:?}: a spike shorter than that may \
         be missing from a peak",
        stats.achieved_interval.unwrap_or(stats.interval),
        stats.interval,
        stats.max_gap
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn the_interval_widens_only_when_reads_take_over_half_of_it() {
        assert_eq!(interval_for(5 * MS, Duration::from_micros(96)), 5 * MS);
        assert_eq!(interval_for(5 * MS, Duration::from_micros(2500)), 5 * MS);
        assert_eq!(
            interval_for(5 * MS, Duration::from_micros(3010)),
            Duration::from_micros(6100)
        );
    }
}

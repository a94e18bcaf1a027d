//! What a kind of driver call costs, as the sampler plans around it: the least of its
//! latest few durations, so that a call the scheduler preempted on a busy machine does not
//! read as a slow driver, while a driver that became slow shows within a few calls.
//! Owned by the thread that makes the calls.

use std::time::Duration;

/// How many durations the estimate looks back over.
const WINDOW: usize = 8;

/// The latest durations of one kind of call.
#[derive(Debug, Default, Clone)]
pub(super) struct Cost {
    recent: [u64; WINDOW],
    next: usize,
    filled: usize,
}

impl Cost {
    pub(super) fn record(&mut self, took: Duration) {
        self.recent[self.next] = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
        self.next = (self.next + 1) % WINDOW;
        self.filled = (self.filled + 1).min(WINDOW);
    }

    /// Whether a call was timed yet.
    pub(super) fn measured(&self) -> bool {
        self.filled > 0
    }

    /// The cost to plan with; zero before the first call.
    pub(super) fn get(&self) -> Duration {
        let least = self.recent[..self.filled].iter().min().copied();
        Duration::from_nanos(least.unwrap_or(0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_preempted_call_does_not_count_but_a_slow_driver_shows_within_the_window() {
        let mut cost = Cost::default();
        assert_eq!(cost.get(), Duration::ZERO);
        for _ in 0..5 {
            cost.record(Duration::from_micros(12));
        }
        cost.record(Duration::from_millis(9));
        assert_eq!(cost.get(), Duration::from_micros(12));
        for _ in 0..WINDOW {
            cost.record(Duration::from_millis(3));
        }
        assert_eq!(cost.get(), Duration::from_millis(3));
    }
}

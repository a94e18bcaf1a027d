//! One reading that may be missing, in eight bytes, from the sampler's atomics to the wire.
//!
//! A reading is `u64::MAX` when not measured: no device or host holds 16 EiB, so a measured
//! value is at most `u64::MAX - 1` (a larger one is kept as that). Zero is a measurement.
//! The sampler publishes readings in [`AtomicReading`]s, a span copies them into its figures
//! as they are, and only the attribute writer asks [`Reading::get`] whether there is one:
//! nothing between the device and the wire converts to `Option<u64>` and back.

use std::sync::atomic::{AtomicU64, Ordering};

/// A measurement, or "not measured"; see the module docs.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Reading(u64);

impl Reading {
    /// Not measured.
    pub(crate) const NONE: Self = Self(u64::MAX);

    /// A measured value (`u64::MAX` is kept as `u64::MAX - 1`).
    pub(crate) const fn some(value: u64) -> Self {
        if value == u64::MAX {
            Self(u64::MAX - 1)
        } else {
            Self(value)
        }
    }

    /// The value, if it was measured.
    pub(crate) const fn get(self) -> Option<u64> {
        if self.0 == u64::MAX {
            None
        } else {
            Some(self.0)
        }
    }

    pub(crate) const fn is_some(self) -> bool {
        self.0 != u64::MAX
    }

    pub(crate) const fn is_none(self) -> bool {
        self.0 == u64::MAX
    }

    /// The higher of two readings, or the one that was measured.
    #[must_use]
    pub(crate) const fn max(self, other: Self) -> Self {
        // Adding one turns "not measured" into 0, below every measurement.
        let (a, b) = (self.0.wrapping_add(1), other.0.wrapping_add(1));
        Self(if a > b { a } else { b }.wrapping_sub(1))
    }
}

impl From<Option<u64>> for Reading {
    fn from(value: Option<u64>) -> Self {
        match value {
            Some(value) => Self::some(value),
            None => Self::NONE,
        }
    }
}

impl Default for Reading {
    /// Not measured.
    fn default() -> Self {
        Self::NONE
    }
}

impl std::fmt::Debug for Reading {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.get().fmt(f)
    }
}

/// A [`Reading`] shared between threads, in one `AtomicU64`. Every access is relaxed: a
/// reading stands alone, nothing else is published through it.
#[derive(Debug)]
pub(crate) struct AtomicReading(AtomicU64);

impl AtomicReading {
    /// Not measured yet.
    pub(crate) const fn none() -> Self {
        Self(AtomicU64::new(u64::MAX))
    }

    pub(crate) fn load(&self) -> Reading {
        Reading(self.0.load(Ordering::Relaxed))
    }

    pub(crate) fn store(&self, reading: Reading) {
        self.0.store(reading.0, Ordering::Relaxed);
    }

    /// Stores `reading` and returns the one it replaced.
    pub(crate) fn swap(&self, reading: Reading) -> Reading {
        Reading(self.0.swap(reading.0, Ordering::Relaxed))
    }

    /// Raises the reading to `reading` when that is higher or nothing was measured yet; a
    /// reading not measured leaves it as it is.
    pub(crate) fn raise(&self, reading: Reading) {
        if reading.is_none() {
            return;
        }
        let _ = self
            .0
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |current| {
                (current == u64::MAX || reading.0 > current).then_some(reading.0)
            });
    }
}

impl Default for AtomicReading {
    fn default() -> Self {
        Self::none()
    }
}

#[cfg(test)]
mod tests {
    use super::{AtomicReading, Reading};

    #[test]
    fn zero_the_highest_measurement_and_not_measured_each_survive() {
        for value in [None, Some(0), Some(1), Some(u64::MAX - 1)] {
            assert_eq!(Reading::from(value).get(), value);
            let atomic = AtomicReading::none();
            atomic.store(Reading::from(value));
            assert_eq!(atomic.load().get(), value);
        }
        // The one value that cannot be told from "not measured" stays a measurement.
        assert_eq!(Reading::some(u64::MAX).get(), Some(u64::MAX - 1));
        assert_eq!(AtomicReading::none().load().get(), None);
        assert_eq!(std::mem::size_of::<Reading>(), 8);
        assert_eq!(std::mem::size_of::<AtomicReading>(), 8);
    }

    #[test]
    fn the_higher_of_two_is_the_measured_one_when_the_other_is_not() {
        let (none, zero, top) = (Reading::NONE, Reading::some(0), Reading::some(u64::MAX - 1));
        assert_eq!(none.max(none), none);
        assert_eq!(none.max(zero), zero);
        assert_eq!(zero.max(none), zero);
        assert_eq!(top.max(none), top);
        assert_eq!(zero.max(top), top);
        assert_eq!(Reading::some(7).max(Reading::some(5)).get(), Some(7));
    }

    #[test]
    fn raising_keeps_the_highest_and_ignores_what_was_not_measured() {
        let peak = AtomicReading::none();
        peak.raise(Reading::NONE);
        assert_eq!(peak.load(), Reading::NONE);
        peak.raise(Reading::some(0));
        assert_eq!(peak.load().get(), Some(0), "zero is a measurement");
        peak.raise(Reading::some(u64::MAX - 1));
        peak.raise(Reading::some(3));
        peak.raise(Reading::NONE);
        assert_eq!(peak.load().get(), Some(u64::MAX - 1));
        assert_eq!(peak.swap(Reading::NONE).get(), Some(u64::MAX - 1));
        assert_eq!(peak.load(), Reading::NONE);
    }
}

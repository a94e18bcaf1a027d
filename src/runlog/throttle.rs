//! Throttled spans gathered for people: which steps carried a `gpu.throttled` event, the
//! clock event reasons they saw and the lowest SM clock they read, written as one phrase
//! (`steps 10-12 (sw_power_cap, hw_slowdown; SM clock down to 1210 MHz)`). The summary's
//! rows and the job view write throttling alike through it.

use std::collections::BTreeSet;

use crate::record::EnergyFigures;

/// The throttled steps of one epoch, or of one rank.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Throttled {
    /// `ml.step` of each throttled step, in the order added.
    pub steps: Vec<i64>,
    /// The reasons any of them saw, by name.
    pub reasons: BTreeSet<String>,
    /// The lowest SM clock any of them read, in MHz.
    pub sm_clock_min_mhz: Option<i64>,
}

impl Throttled {
    /// Adds step `step` when its figures say it carries a `gpu.throttled` event; whether
    /// it did.
    pub fn add(&mut self, step: i64, energy: &EnergyFigures) -> bool {
        if !energy.throttled {
            return false;
        }
        self.steps.push(step);
        self.reasons.extend(energy.throttle_reasons.iter().cloned());
        if let Some(mhz) = energy.sm_clock_min_mhz {
            self.sm_clock_min_mhz = Some(self.sm_clock_min_mhz.map_or(mhz, |m| m.min(mhz)));
        }
        true
    }

    /// Whether no step was throttled.
    pub fn is_empty(&self) -> bool {
        self.steps.is_empty()
    }

    /// `steps 10-12, 15 (sw_power_cap, hw_slowdown; SM clock down to 1210 MHz)`.
    pub fn describe(&self) -> String {
        format!(
            "step{} {}{}",
            if self.steps.len() == 1 { "" } else { "s" },
            ranges(&self.steps),
            reasons_text(&self.reasons, self.sm_clock_min_mhz)
        )
    }
}

/// ` (sw_power_cap, hw_slowdown; SM clock down to 1210 MHz)`, or empty with neither.
pub fn reasons_text(reasons: &BTreeSet<String>, sm_clock_min_mhz: Option<i64>) -> String {
    let reasons: Vec<&str> = reasons.iter().map(String::as_str).collect();
    match (reasons.is_empty(), sm_clock_min_mhz) {
        (true, None) => String::new(),
        (false, None) => format!(" ({})", reasons.join(", ")),
        (true, Some(mhz)) => format!(" (SM clock down to {mhz} MHz)"),
        (false, Some(mhz)) => format!(" ({}; SM clock down to {mhz} MHz)", reasons.join(", ")),
    }
}

/// Step indexes as runs: `10-12, 15, 20-21`.
pub fn ranges(steps: &[i64]) -> String {
    let mut sorted = steps.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    let mut parts: Vec<String> = Vec::new();
    let mut i = 0;
    while i < sorted.len() {
        let mut j = i;
        while j + 1 < sorted.len() && sorted[j + 1] == sorted[j] + 1 {
            j += 1;
        }
        parts.push(if i == j {
            sorted[i].to_string()
        } else {
            format!("{}-{}", sorted[i], sorted[j])
        });
        i = j + 1;
    }
    parts.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_read_as_runs_with_their_reasons_and_lowest_clock() {
        assert_eq!(ranges(&[12, 10, 11, 15, 20, 21, 11]), "10-12, 15, 20-21");
        let throttled = Throttled {
            steps: vec![10, 11, 12],
            reasons: ["sw_power_cap".to_owned(), "hw_slowdown".to_owned()].into(),
            sm_clock_min_mhz: Some(1210),
        };
        assert_eq!(
            throttled.describe(),
            "steps 10-12 (hw_slowdown, sw_power_cap; SM clock down to 1210 MHz)"
        );
        let one = Throttled {
            steps: vec![4],
            ..Throttled::default()
        };
        assert_eq!(one.describe(), "step 4");
    }
}

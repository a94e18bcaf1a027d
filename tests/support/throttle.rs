//! Steps run while a driver holds the GPU's clock down, and what their spans must say of
//! it: the reasons in NVIDIA's words, the share of readings held down, the lowest graphics
//! clock and one `gpu.throttled` event. On a machine written by the test the sampler's
//! reads are timed, so a step is judged only where the sampler kept its cadence.

use std::ops::RangeInclusive;

use gpuspan::Builder;

use crate::cadence::{settle, SETTLE};
use crate::receiver::{ReceivedSpan, Receiver};

/// What a driver did through a run of steps.
pub struct Throttling {
    /// The steps that ran while it held the clock down.
    pub held: RangeInclusive<i64>,
    /// Why it did, in NVIDIA's words.
    pub reasons: &'static [&'static str],
    /// The clock through held step `n` is this plus `n`, so a span's minimum shows which
    /// step's reading it took.
    pub held_mhz: i64,
    /// The clock through the other steps.
    pub free_mhz: i64,
}

/// Six steps, the driver holding the clock down for its power limit and its temperature
/// through steps 2 and 3 only.
pub const POWER_AND_THERMAL_THROUGH_STEPS_2_AND_3: Throttling = Throttling {
    held: 2..=3,
    reasons: &["sw_power_cap", "sw_thermal_slowdown"],
    held_mhz: 1100,
    free_mhz: 2400,
};

impl Throttling {
    /// Whether the driver held the clock down through `step`.
    pub fn holds(&self, step: i64) -> bool {
        self.held.contains(&step)
    }

    /// The graphics clock through `step`, in MHz.
    pub fn mhz(&self, step: i64) -> i64 {
        if self.holds(step) {
            self.held_mhz + step
        } else {
            self.free_mhz
        }
    }

    /// Asserts that a step span says what the driver did while it ran.
    pub fn assert_span(&self, span: &ReceivedSpan) {
        let step = span.int_attr("ml.step").expect("a step span");
        let events = span.events_named("gpu.throttled");
        let clock = span.int_attr("gpu.clock.sm.min");
        assert_eq!(clock, Some(self.mhz(step)), "step {step}");
        if self.holds(step) {
            assert_eq!(
                span.strs_attr("gpu.throttle.reasons").as_deref(),
                Some(self.reasons),
                "step {step}"
            );
            assert_eq!(span.double_attr("gpu.throttle.share"), Some(1.0));
            assert_eq!(events.len(), 1, "step {step}");
        } else {
            assert_eq!(span.strs_attr("gpu.throttle.reasons"), None, "step {step}");
            assert_eq!(span.double_attr("gpu.throttle.share"), Some(0.0));
            assert!(events.is_empty(), "step {step}");
        }
    }
}

/// Runs six steps under `builder` (its memory source `source`) on a machine written by the
/// test, `set(held, mhz)` writing the driver's state as `throttling` has it before each;
/// then asserts what each step's span says, for the steps the sampler kept its cadence
/// through, which must be at least four.
pub fn run_six_steps(
    builder: Builder,
    receiver: &Receiver,
    source: &str,
    throttling: &Throttling,
    mut set: impl FnMut(bool, i64),
) {
    let (telemetry, on_time) = crate::setup::run(builder, |telemetry| {
        assert_eq!(telemetry.memory_source(), Some(source));
        let mut on_time = Vec::new();
        for step in 0..6i64 {
            set(throttling.holds(step), throttling.mhz(step));
            // A reading of the new state is the latest as the step opens.
            let mut kept = settle(telemetry, SETTLE);
            let _step = gpuspan::step_span!(step);
            kept &= settle(telemetry, SETTLE);
            on_time.push(kept);
        }
        on_time
    });
    telemetry.shutdown().expect("clean shutdown");

    let steps = receiver.spans_named("step");
    assert_eq!(steps.len(), 6);
    let judged = on_time.iter().filter(|&&kept| kept).count();
    assert!(judged >= 4, "too busy a machine to judge: {on_time:?}");
    for span in &steps {
        let step = span.int_attr("ml.step").expect("a step span");
        if on_time[step as usize] {
            throttling.assert_span(span);
        } else {
            eprintln!("step {step}: the sampler fell behind: not judged");
        }
    }
}

//! burn-train's training loop, followed from the lines it logs on the training thread.
//!
//! burn 0.22's `Learner` has no hook before a step: its metric loggers and event processor
//! run on a thread of their own, after the step. Its single-device and DDP loops do log, on
//! the thread that trains and at the moment it happens:
//! - `Executing training step for epoch E`, before an epoch's first batch;
//! - `Iteration N`, before each step's forward pass;
//! - `Executing validation step for epoch E`, before validation;
//! - `Training interrupted: <reason>`, when the interrupter stopped the loop.
//!
//! Those lines open and close the spans, so each span is opened and closed on the training
//! thread with the sampler's figures, as `epoch_span!` and `step_span!` are:
//! - `epoch` E: from its training line to the next epoch's (its validation included);
//! - `step` N: from `Iteration N` to the next line: the forward and backward passes, the
//!   optimizer step, the hand-off to the metrics, and the loading of the next batch;
//! - `validation`: from its line to the next epoch's.
//!
//! The spans still open when `Gpuspan::launch` returns close then. burn's multi-device
//! strategy logs no `Iteration` line: it gets epoch and validation spans only.

use std::cell::RefCell;

use gpuspan::names::span::VALIDATION;
use gpuspan::MemorySpan;

/// A point in burn's loop that opens or closes spans.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Boundary {
    /// An epoch's training starts (burn counts epochs from 1).
    Epoch(u64),
    /// A training step starts (burn counts iterations from 1 in each epoch).
    Iteration(u64),
    /// An epoch's validation starts.
    Validation(u64),
    /// The interrupter stopped training.
    Interrupted,
}

/// The module that logs burn's training loop; the lines of other crates are left alone.
const TRAIN_TARGET: &str = "burn_train::";

/// The boundary a log line of burn-train marks, if any.
pub(crate) fn boundary(target: &str, message: &str) -> Option<Boundary> {
    if !target.starts_with(TRAIN_TARGET) {
        return None;
    }
    let number = |rest: &str| {
        rest.split(|c: char| !c.is_ascii_digit())
            .next()
            .and_then(|digits| digits.parse().ok())
    };
    if let Some(rest) = message.strip_prefix("Iteration ") {
        return number(rest).map(Boundary::Iteration);
    }
    if let Some(rest) = message.strip_prefix("Executing training step for epoch ") {
        return number(rest).map(Boundary::Epoch);
    }
    if let Some(rest) = message.strip_prefix("Executing validation step for epoch ") {
        return number(rest).map(Boundary::Validation);
    }
    message
        .starts_with("Training interrupted")
        .then_some(Boundary::Interrupted)
}

/// The spans open on one training thread.
#[derive(Default)]
struct Open {
    epoch: Option<(u64, MemorySpan)>,
    step: Option<MemorySpan>,
    validation: Option<MemorySpan>,
}

impl Open {
    /// Closes the inner spans before the epoch, so each closes inside its parent.
    fn close_inner(&mut self) {
        self.step = None;
        self.validation = None;
    }

    fn close_all(&mut self) {
        self.close_inner();
        self.epoch = None;
    }

    fn cross(&mut self, boundary: Boundary) {
        match boundary {
            Boundary::Epoch(epoch) => {
                self.close_all();
                self.epoch = Some((epoch, gpuspan::epoch_span!(epoch)));
            }
            Boundary::Iteration(iteration) => {
                self.close_inner();
                self.step = Some(gpuspan::step_span!(iteration));
            }
            Boundary::Validation(epoch) => {
                self.close_inner();
                self.validation = Some(gpuspan::memory_span!(VALIDATION, ml.epoch = epoch));
            }
            Boundary::Interrupted => self.close_all(),
        }
    }
}

thread_local! {
    static OPEN: RefCell<Open> = RefCell::new(Open::default());
}

/// Opens and closes this thread's spans at `boundary`.
pub(crate) fn cross(boundary: Boundary) {
    // A thread being torn down has no spans left to move.
    let _ = OPEN.try_with(|open| {
        if let Ok(mut open) = open.try_borrow_mut() {
            open.cross(boundary);
        }
    });
}

/// Closes this thread's spans: training has returned.
pub(crate) fn close_all() {
    let _ = OPEN.try_with(|open| {
        if let Ok(mut open) = open.try_borrow_mut() {
            open.close_all();
        }
    });
}

/// The epoch open on this thread, if any.
#[cfg(test)]
fn open_epoch() -> Option<u64> {
    OPEN.with(|open| open.borrow().epoch.as_ref().map(|(epoch, _)| *epoch))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SINGLE: &str = "burn_train::learner::supervised::strategies::single::epoch";

    #[test]
    fn burn_trains_lines_mark_the_boundaries_with_burns_own_numbers() {
        assert_eq!(
            boundary(SINGLE, "Executing training step for epoch 3"),
            Some(Boundary::Epoch(3))
        );
        assert_eq!(
            boundary(SINGLE, "Iteration 12"),
            Some(Boundary::Iteration(12))
        );
        assert_eq!(
            boundary(SINGLE, "Executing validation step for epoch 3"),
            Some(Boundary::Validation(3))
        );
        assert_eq!(
            boundary(
                "burn_train::learner::supervised::strategies::multi::epoch",
                "Executing training step for epoch 2 on devices [Flex]"
            ),
            Some(Boundary::Epoch(2))
        );
        assert_eq!(
            boundary(
                "burn_train::learner::supervised::strategies::single::strategy",
                "Training interrupted: gpuspan: gpu 0 reached 3.0 GiB"
            ),
            Some(Boundary::Interrupted)
        );
    }

    #[test]
    fn other_lines_and_other_crates_mark_nothing() {
        assert_eq!(boundary("my_app", "Iteration 3"), None);
        assert_eq!(boundary(SINGLE, "Iteration"), None);
        assert_eq!(boundary(SINGLE, "Iteration three"), None);
        assert_eq!(boundary(SINGLE, "Closing thread on device 0"), None);
    }

    #[test]
    fn an_epoch_line_replaces_the_open_epoch_and_interruption_closes_it() {
        cross(Boundary::Epoch(1));
        cross(Boundary::Iteration(1));
        assert_eq!(open_epoch(), Some(1));
        cross(Boundary::Epoch(2));
        assert_eq!(open_epoch(), Some(2));
        cross(Boundary::Interrupted);
        assert_eq!(open_epoch(), None);
    }
}

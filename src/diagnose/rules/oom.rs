//! The near-OOM recorder's findings (`diagnose/near_oom`): a device crossing the near-OOM
//! threshold, and an out-of-memory error the program reported. No span raises them: the
//! recorder counts them and the tap places their events on the innermost span open at the
//! time, so here they are only a counter and a mark.

use super::{Attributes, Counter, Detail, FindingKind};
use crate::names::event;

/// A device crossed the near-OOM threshold.
pub(crate) const NEAR_OOM: RecorderFinding = RecorderFinding {
    event: event::NEAR_OOM,
    description: "Times a device crossed the near-OOM threshold",
    mark: "near OOM",
};

/// The program ran out of device memory.
pub(crate) const OOM: RecorderFinding = RecorderFinding {
    event: event::OOM,
    description: "Out-of-memory errors reported by the program",
    mark: "OOM",
};

/// A kind of finding the recorder makes: an unsplit counter and a fixed mark.
pub(crate) struct RecorderFinding {
    event: &'static str,
    description: &'static str,
    mark: &'static str,
}

impl FindingKind for RecorderFinding {
    fn event(&self) -> &'static str {
        self.event
    }

    fn counter(&self) -> Counter {
        Counter {
            description: self.description,
            split: None,
        }
    }

    fn mark(&self, _: &dyn Attributes, _: Detail) -> String {
        self.mark.to_owned()
    }
}

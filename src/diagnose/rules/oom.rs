//! The near-OOM recorder's findings (`diagnose/near_oom`): a device crossing the near-OOM
//! threshold, and an out-of-memory error the program reported. No span raises them: the
//! recorder counts them and the tap places their events on the innermost span open at the
//! time, so here they are only a counter and a mark.

use super::{Attributes, Counter, Detail, FindingKind};
use crate::names::event;

/// The kind of finding: a device crossed the near-OOM threshold.
pub(crate) struct NearOom;

impl FindingKind for NearOom {
    fn event(&self) -> &'static str {
        event::NEAR_OOM
    }

    fn counter(&self) -> Counter {
        Counter {
            description: "Times a device crossed the near-OOM threshold",
            split: None,
        }
    }

    fn mark(&self, _: &dyn Attributes, _: Detail) -> String {
        "near OOM".to_owned()
    }
}

/// The kind of finding: the program ran out of device memory.
pub(crate) struct Oom;

impl FindingKind for Oom {
    fn event(&self) -> &'static str {
        event::OOM
    }

    fn counter(&self) -> Counter {
        Counter {
            description: "Out-of-memory errors reported by the program",
            split: None,
        }
    }

    fn mark(&self, _: &dyn Attributes, _: Detail) -> String {
        "OOM".to_owned()
    }
}

//! A device crossed the near-OOM threshold. No span raises it: the near-OOM recorder
//! (`diagnose/near_oom`) counts it and the tap places its event on the innermost span open
//! at the time, so here it is only a counter and a mark.

use super::{FindingKind, RecorderFinding};
use crate::names::event;

pub(super) const KIND: &dyn FindingKind = &RecorderFinding {
    event: event::NEAR_OOM,
    description: "Times a device crossed the near-OOM threshold",
    mark: "near OOM",
};

//! The program ran out of device memory and said so (`gpuspan::record_oom`, the PyTorch
//! hooks). As with near-OOM, the recorder counts it and the tap places its event, so here
//! it is only a counter and a mark.

use super::{FindingKind, RecorderFinding};
use crate::names::event;

pub(super) const KIND: &dyn FindingKind = &RecorderFinding {
    event: event::OOM,
    description: "Out-of-memory errors reported by the program",
    mark: "OOM",
};

//! Another rank of the job ran out of device memory, or came near (`peers.rs` reads its
//! alarm). The watcher counts it and the tap places its event, so here it is only a
//! counter and a mark.

use super::{FindingKind, RecorderFinding};
use crate::names::event;

pub(super) const KIND: &dyn FindingKind = &RecorderFinding {
    event: event::PEER_OOM,
    description: "Out-of-memory errors and near-OOM crossings of the job's other ranks",
    mark: "peer OOM",
};

//! The spans open right now (and the last few closed), kept by a small tracing layer, so
//! the near-OOM recorder can name every open span with its start from the sampler thread.
//!
//! The training thread pays one short lock when a span opens and one when it closes.

use std::collections::VecDeque;
use std::sync::{Mutex, MutexGuard};

use crate::util::time::unix_nanos;

/// Closed spans kept to name the span a rise began in.
const CLOSED_KEPT: usize = 256;

/// A span as the recorder names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct OpenSpan {
    pub(crate) id: u64,
    pub(crate) name: &'static str,
    /// `ml.epoch` or `ml.step`.
    pub(crate) index: Option<(&'static str, i64)>,
    pub(crate) start_unix_nanos: u64,
    pub(crate) end_unix_nanos: Option<u64>,
}

impl OpenSpan {
    /// `step 12`, `epoch 3`, or the span's name.
    pub(crate) fn label(&self) -> String {
        match self.index {
            Some((_, index)) => format!("{} {index}", self.name),
            None => self.name.to_owned(),
        }
    }
}

#[derive(Debug, Default)]
struct Lists {
    open: Vec<OpenSpan>,
    closed: VecDeque<OpenSpan>,
}

/// The registry the layer fills.
#[derive(Debug, Default)]
pub(crate) struct OpenSpans(Mutex<Lists>);

impl OpenSpans {
    fn lock(&self) -> MutexGuard<'_, Lists> {
        crate::util::sync::lock(&self.0)
    }

    /// Every open span, outermost (earliest start) first.
    pub(crate) fn open(&self) -> Vec<OpenSpan> {
        let mut open = self.lock().open.clone();
        open.sort_by_key(|s| s.start_unix_nanos);
        open
    }

    /// The innermost span (latest start) that was open at `unix_nanos`, open or closed now.
    pub(crate) fn innermost_at(&self, unix_nanos: u64) -> Option<OpenSpan> {
        let lists = self.lock();
        lists
            .open
            .iter()
            .chain(lists.closed.iter())
            .filter(|s| {
                s.start_unix_nanos <= unix_nanos && s.end_unix_nanos.is_none_or(|e| e >= unix_nanos)
            })
            .max_by_key(|s| s.start_unix_nanos)
            .cloned()
    }

    pub(crate) fn opened(&self, span: OpenSpan) {
        self.lock().open.push(span);
    }

    pub(crate) fn closed(&self, id: u64) {
        let mut lists = self.lock();
        if let Some(position) = lists.open.iter().rposition(|s| s.id == id) {
            let mut span = lists.open.swap_remove(position);
            span.end_unix_nanos = Some(unix_nanos(std::time::SystemTime::now()));
            if lists.closed.len() == CLOSED_KEPT {
                lists.closed.pop_front();
            }
            lists.closed.push_back(span);
        }
    }
}

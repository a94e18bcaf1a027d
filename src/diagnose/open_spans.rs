//! The spans open right now (and the last few closed), kept by a small tracing layer, so
//! the near-OOM recorder can name every open span with its start from the sampler thread.
//!
//! The training thread pays one short lock when a span opens and one when it closes.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id};
use tracing_subscriber::layer::Context;
use tracing_subscriber::Layer;

use super::near_oom::Recorder;
use crate::runlog::unix_nanos;

/// Closed spans kept to name the span a rise began in.
const CLOSED_KEPT: usize = 256;

/// A span as the recorder names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct OpenSpan {
    id: u64,
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
        self.0.lock().unwrap_or_else(|p| p.into_inner())
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

    fn opened(&self, span: OpenSpan) {
        self.lock().open.push(span);
    }

    fn closed(&self, id: u64) {
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

/// The layer that keeps [`OpenSpans`]; it also leads `record_oom` to the recorder of the
/// subscriber it is called under.
#[derive(Debug, Clone)]
pub(crate) struct OpenSpanLayer {
    pub(crate) spans: Arc<OpenSpans>,
    pub(crate) recorder: Weak<Recorder>,
}

struct IndexVisitor(Option<(&'static str, i64)>);

impl Visit for IndexVisitor {
    fn record_i64(&mut self, field: &Field, value: i64) {
        if matches!(field.name(), "ml.epoch" | "ml.step") {
            self.0 = Some((field.name(), value));
        }
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.record_i64(field, i64::try_from(value).unwrap_or(i64::MAX));
    }

    fn record_debug(&mut self, _field: &Field, _value: &dyn std::fmt::Debug) {}
}

impl<S: tracing::Subscriber> Layer<S> for OpenSpanLayer {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, _ctx: Context<'_, S>) {
        let mut index = IndexVisitor(None);
        attrs.record(&mut index);
        self.spans.opened(OpenSpan {
            id: id.into_u64(),
            name: attrs.metadata().name(),
            index: index.0,
            start_unix_nanos: unix_nanos(std::time::SystemTime::now()),
            end_unix_nanos: None,
        });
    }

    fn on_close(&self, id: Id, _ctx: Context<'_, S>) {
        self.spans.closed(id.into_u64());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracing_subscriber::layer::SubscriberExt;

    #[test]
    fn open_spans_are_listed_outermost_first_and_closed_ones_are_remembered() {
        let spans = Arc::new(OpenSpans::default());
        let subscriber = tracing_subscriber::registry().with(OpenSpanLayer {
            spans: Arc::clone(&spans),
            recorder: Weak::new(),
        });
        tracing::subscriber::with_default(subscriber, || {
            let epoch = tracing::info_span!("epoch", ml.epoch = 3).entered();
            let step = tracing::info_span!("step", ml.step = 7).entered();
            let open = spans.open();
            assert_eq!(
                open.iter().map(OpenSpan::label).collect::<Vec<_>>(),
                ["epoch 3", "step 7"]
            );
            let during_step = unix_nanos(std::time::SystemTime::now());
            drop(step);
            assert_eq!(spans.open().len(), 1);
            assert_eq!(spans.innermost_at(during_step).unwrap().label(), "step 7");
            let after = unix_nanos(std::time::SystemTime::now()) + 1;
            assert_eq!(spans.innermost_at(after).unwrap().label(), "epoch 3");
            drop(epoch);
        });
        assert!(spans.open().is_empty());
    }
}

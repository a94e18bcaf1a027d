//! The tracing layer that keeps [`OpenSpans`]: one short lock when a span opens and one
//! when it closes, on the training thread.

use std::sync::{Arc, Weak};

use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id};
use tracing_subscriber::layer::Context;
use tracing_subscriber::Layer;

use super::near_oom::Recorder;
use super::open_spans::{OpenSpan, OpenSpans};
use crate::names::attribute as attr;
use crate::util::time::unix_nanos;

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
        if matches!(field.name(), attr::ML_EPOCH | attr::ML_STEP) {
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
    use crate::util::time::unix_nanos;
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

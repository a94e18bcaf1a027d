//! The kinds of finding diagnosis makes, in one registry: each kind's event name, counter,
//! epoch-table mark and warning line, and for a span rule the logic that makes its
//! findings. The diagnosis tap, the metrics and `gpuspan report` loop over [`KINDS`]. Every
//! other file of this folder is a kind: a new rule is its file, its `mod` line and its
//! `KIND` in that list here, and its event's name in `names.rs`.
//!
//! Threading: the kinds are stateless and shared; a [`SpanRule`] is a run's state and lives
//! on the export thread inside the diagnosis tap.

use opentelemetry::KeyValue;
use opentelemetry_proto::tonic::common::v1 as proto;

use crate::diagnose::settings::DiagnoseSettings;
use crate::diagnose::{Findings, Limits};
use crate::record::{Role, SpanRecord};

mod budget;
mod leak;
mod near_oom;
mod oom;
pub(crate) mod oom_forecast;
mod peer_oom;

#[cfg(test)]
pub(crate) use leak::tests::Noise;

/// Every kind of finding, in the order the tap applies the span rules, which is the order
/// of their events on one span. A new kind goes at the end, so that events on a span keep
/// the order they had.
pub(crate) const KINDS: &[&dyn FindingKind] = &[
    budget::KIND,
    leak::KIND,
    near_oom::KIND,
    oom::KIND,
    peer_oom::KIND,
    oom_forecast::KIND,
];

/// The kind of finding whose event is named `event`.
pub(crate) fn kind(event: &str) -> Option<&'static dyn FindingKind> {
    KINDS.iter().copied().find(|k| k.event() == event)
}

/// What every finding of one kind shares: its span event, its counter, its mark on the
/// epoch table and its warning line. All but the event's name are read from the event's
/// attributes, so a finding made now and one read back from `traces.jsonl` look alike.
pub(crate) trait FindingKind: Sync {
    /// The span event's name (from [`names::event`](crate::names::event)); the counter of
    /// these findings has the same name.
    fn event(&self) -> &'static str;

    /// The counter's description and how it is split.
    fn counter(&self) -> Counter;

    /// The mark on the epoch table of a finding on an epoch span.
    fn mark(&self, event: &dyn Attributes, detail: Detail) -> String;

    /// The line printed (after `gpuspan: warning: `) for the run's first finding of this
    /// kind on `record`; `None` prints nothing.
    fn warning(&self, _event: &dyn Attributes, _record: &SpanRecord) -> Option<String> {
        None
    }

    /// The rule's state for one run, for a kind that spans raise; `None` for a kind raised
    /// elsewhere (the near-OOM recorder).
    fn start(&self, _setup: &Setup<'_>) -> Option<Box<dyn SpanRule>> {
        None
    }
}

/// A kind of finding no span rule makes (the near-OOM recorder makes it): an unsplit
/// counter and a fixed mark.
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

/// A span rule's state over one run, fed every exported span on the export thread.
pub(crate) trait SpanRule: Send {
    /// The findings `record` completes: each one's event attributes (the tap adds the
    /// event at the span's end, counts it, marks it and warns once).
    fn on_span(&mut self, record: &SpanRecord, findings: &mut Findings) -> Vec<Vec<KeyValue>>;

    /// The error status a finding sets on its span, if the settings ask for one. A span
    /// that already failed keeps its own status.
    fn error(&self, _event: &dyn Attributes) -> Option<String> {
        None
    }
}

/// What a span rule starts from.
pub(crate) struct Setup<'a> {
    pub(crate) settings: &'a DiagnoseSettings,
    pub(crate) limits: &'a Limits,
    /// The run's one request to stop the loop.
    pub(crate) stop: &'a std::sync::Arc<crate::diagnose::stop::StopRequest>,
}

/// The counter of one kind of finding: named as its event, unit `{finding}`.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Counter {
    pub(crate) description: &'static str,
    /// The event attribute that splits the counter, and its values; a split counter
    /// reports only the values found so far, an unsplit one always reports.
    pub(crate) split: Option<(&'static str, &'static [&'static str])>,
}

/// How much an epoch-table mark says: all of it while the run goes on, the rule alone when
/// read back (`gpuspan report`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Detail {
    Live,
    ReadBack,
}

/// A finding's event attributes, as the tap makes them or as `traces.jsonl` holds them.
pub(crate) trait Attributes {
    /// The string value of `key`.
    fn text(&self, key: &str) -> Option<&str>;
    /// The integer value of `key`.
    fn int(&self, key: &str) -> Option<i64>;
}

impl Attributes for Vec<KeyValue> {
    fn text(&self, key: &str) -> Option<&str> {
        match &self.iter().find(|kv| kv.key.as_str() == key)?.value {
            opentelemetry::Value::String(s) => Some(s.as_str()),
            _ => None,
        }
    }

    fn int(&self, key: &str) -> Option<i64> {
        match self.iter().find(|kv| kv.key.as_str() == key)?.value {
            opentelemetry::Value::I64(v) => Some(v),
            _ => None,
        }
    }
}

impl Attributes for Vec<proto::KeyValue> {
    fn text(&self, key: &str) -> Option<&str> {
        match proto_value(self, key)? {
            proto::any_value::Value::StringValue(s) => Some(s),
            _ => None,
        }
    }

    fn int(&self, key: &str) -> Option<i64> {
        match proto_value(self, key)? {
            proto::any_value::Value::IntValue(v) => Some(*v),
            _ => None,
        }
    }
}

/// The value of `key` among attributes read back from OTLP.
fn proto_value<'a>(
    attributes: &'a [proto::KeyValue],
    key: &str,
) -> Option<&'a proto::any_value::Value> {
    let found = attributes.iter().find(|kv| kv.key == key)?;
    found.value.as_ref()?.value.as_ref()
}

/// `epoch 3`, `step 12`, or the span's name: how findings and markers name a span.
pub(crate) fn span_label(record: &SpanRecord) -> String {
    match record.role {
        Role::Epoch(i) => format!("epoch {i}"),
        Role::Step(i) => format!("step {i}"),
        Role::Other => record.name.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_registry_holds_every_finding_the_names_list_once() {
        let mut registered: Vec<&str> = KINDS.iter().map(|k| k.event()).collect();
        let mut named = crate::names::event::FINDINGS.to_vec();
        registered.sort_unstable();
        named.sort_unstable();
        assert_eq!(registered, named);
    }

    #[test]
    fn a_span_gets_its_findings_in_the_order_it_always_had() {
        use crate::names::event::{
            BUDGET_EXCEEDED, LEAK_SUSPECTED, NEAR_OOM, OOM, OOM_FORECAST, PEER_OOM,
        };
        let order: Vec<&str> = KINDS.iter().map(|k| k.event()).collect();
        assert_eq!(
            order,
            [
                BUDGET_EXCEEDED,
                LEAK_SUSPECTED,
                NEAR_OOM,
                OOM,
                PEER_OOM,
                OOM_FORECAST
            ]
        );
    }
}

//! How many findings of each registered kind were made, for their counters and the
//! summary: one counter a kind, named as its event, split by an attribute where the kind
//! says so (leaks by rule).
//!
//! Threading: counted on the export thread (span rules), the sampler thread and whichever
//! thread reports an OOM (the near-OOM recorder); read by the metric readers and the
//! summary. Plain relaxed atomics: a count is a tally, it orders nothing.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use opentelemetry::metrics::Meter;
use opentelemetry::KeyValue;

use super::rules::{Attributes, KINDS};

/// Findings so far: per kind in [`KINDS`], one tally per value of its split (one if none).
#[derive(Debug)]
pub(crate) struct Counts {
    kinds: Vec<Vec<AtomicU64>>,
}

impl Default for Counts {
    fn default() -> Self {
        let kinds = KINDS
            .iter()
            .map(|kind| {
                let values = kind.counter().split.map_or(1, |(_, values)| values.len());
                (0..values).map(|_| AtomicU64::new(0)).collect()
            })
            .collect();
        Self { kinds }
    }
}

impl Counts {
    /// Where a finding `event` with `attributes` is counted (`None`: not a registered
    /// kind, or a split value the kind does not list).
    pub(crate) fn slot(&self, event: &str, attributes: &dyn Attributes) -> Option<&AtomicU64> {
        let at = KINDS.iter().position(|k| k.event() == event)?;
        let value = match KINDS[at].counter().split {
            None => 0,
            Some((key, values)) => {
                let value = attributes.text(key)?;
                values.iter().position(|v| *v == value)?
            }
        };
        self.kinds.get(at)?.get(value)
    }

    /// Counts one finding.
    pub(crate) fn add(&self, event: &str, attributes: &dyn Attributes) {
        if let Some(slot) = self.slot(event, attributes) {
            slot.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Findings of `event` so far, over every split value.
    pub(crate) fn total(&self, event: &str) -> u64 {
        let at = KINDS.iter().position(|k| k.event() == event);
        at.and_then(|at| self.kinds.get(at))
            .map_or(0, |slots| tally(slots))
    }

    /// One observable counter per kind, on `meter`: unit `{finding}`, named as the
    /// event. A split counter reports the values found so far; an unsplit one always.
    pub(crate) fn register(self: &Arc<Self>, meter: &Meter) {
        for (at, kind) in KINDS.iter().enumerate() {
            let counter = kind.counter();
            let counts = Arc::clone(self);
            meter
                .u64_observable_counter(kind.event())
                .with_unit("{finding}")
                .with_description(counter.description)
                .with_callback(move |observer| {
                    let Some(slots) = counts.kinds.get(at) else {
                        return;
                    };
                    let Some((key, values)) = counter.split else {
                        observer.observe(tally(slots), &[]);
                        return;
                    };
                    for (slot, value) in slots.iter().zip(values) {
                        let count = slot.load(Ordering::Relaxed);
                        if count > 0 {
                            observer.observe(count, &[KeyValue::new(key, *value)]);
                        }
                    }
                })
                .build();
        }
    }
}

/// The findings counted in `slots`, over every split value.
fn tally(slots: &[AtomicU64]) -> u64 {
    slots.iter().map(|s| s.load(Ordering::Relaxed)).sum()
}

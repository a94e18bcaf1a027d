//! The diagnosis tap: on the export thread, every closed span passes it before export. It
//! adds the driver-vs-framework attributes, feeds the batch-size fit, applies the span
//! rules of the registry (`rules/`: leaks, the budget) and turns their findings into
//! events, counts, marks and warnings, and places the near-OOM events on the spans they
//! belong to.

use std::borrow::Cow;
use std::sync::{Arc, Mutex};

use opentelemetry::trace::{Event, Status};
use opentelemetry::KeyValue;
use opentelemetry_sdk::trace::SpanData;

use super::counts::Counts;
use super::near_oom::{system_time, Recorder};
use super::rules::{Detail, FindingKind, SpanRule};
use super::Findings;
use crate::export::tap::SpanTap;
use crate::names::attribute as attr;
use crate::record::{Role, SpanRecord};

/// One registered span rule with its run's state, and whether it has warned yet.
pub(crate) struct RuleState {
    kind: &'static dyn FindingKind,
    rule: Box<dyn SpanRule>,
    warned: bool,
}

pub(crate) struct DiagnoseTap {
    pub(crate) rules: Vec<RuleState>,
    pub(crate) findings: Arc<Mutex<Findings>>,
    pub(crate) counts: Arc<Counts>,
    pub(crate) recorder: Option<Arc<Recorder>>,
    pub(crate) warned_batch_size: bool,
}

impl SpanTap for DiagnoseTap {
    fn on_span(&mut self, span: &mut SpanData, record: &SpanRecord) {
        add_framework_attributes(span, record);
        let shared = Arc::clone(&self.findings);
        let mut findings = shared
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Role::Step(_) = record.role {
            if let (Some(batch), Some(gpu)) = (record.batch_size, record.gpu) {
                findings.fitter.add(batch, gpu.peak);
            }
            if record.batch_size_unreadable && !self.warned_batch_size {
                self.warned_batch_size = true;
                warn_batch_size(span, record);
            }
        }
        for state in &mut self.rules {
            for attributes in state.rule.on_span(record, &mut findings) {
                state.found(&self.counts, span, record, attributes, &mut findings);
            }
        }
        drop(findings);
        self.place_pending(span, record);
    }

    fn name(&self) -> &'static str {
        "diagnosis"
    }
}

/// The one line for a step whose `batch_size` is not a whole number.
fn warn_batch_size(span: &SpanData, record: &SpanRecord) {
    let value = span
        .attributes
        .iter()
        .find(|kv| kv.key.as_str() == attr::BATCH_SIZE)
        .map(|kv| kv.value.as_str().into_owned())
        .unwrap_or_default();
    let step = match record.role {
        Role::Step(step) => step,
        _ => -1,
    };
    eprintln!(
        "gpuspan: warning: step {step} has batch_size = {value:?}, which is not a whole \
         number, so the batch-size fit leaves out such steps; give the batch size as an \
         integer (batch_size = 64)"
    );
}

impl RuleState {
    /// A rule the tap applies, started for this run.
    pub(crate) fn new(kind: &'static dyn FindingKind, rule: Box<dyn SpanRule>) -> Self {
        Self {
            kind,
            rule,
            warned: false,
        }
    }

    /// A finding of this rule on `span`: its event at the span's end, its count, its mark
    /// on an epoch, the rule's first warning, and the error status it may set.
    fn found(
        &mut self,
        counts: &Counts,
        span: &mut SpanData,
        record: &SpanRecord,
        attributes: Vec<KeyValue>,
        findings: &mut Findings,
    ) {
        let event = self.kind.event();
        counts.add(event, &attributes);
        if let Role::Epoch(epoch) = record.role {
            let mark = self.kind.mark(&attributes, Detail::Live);
            findings.marks.push((epoch, mark));
        }
        if !self.warned {
            self.warned = true;
            if let Some(line) = self.kind.warning(&attributes, record) {
                eprintln!("gpuspan: warning: {line}");
            }
        }
        let error = self.rule.error(&attributes);
        if let (Some(message), false) = (error, matches!(span.status, Status::Error { .. })) {
            span.status = Status::error(message);
        }
        span.events
            .events
            .push(Event::new(event, span.end_time, attributes, 0));
    }
}

impl DiagnoseTap {
    /// Puts each waiting near-OOM or OOM event on this span if it is the innermost span
    /// open at the event's time: spans pass in the order they end, so the first span
    /// that covers the time is the innermost one.
    fn place_pending(&mut self, span: &mut SpanData, record: &SpanRecord) {
        let Some(recorder) = &self.recorder else {
            return;
        };
        let mut pending = recorder.pending();
        if pending.is_empty() {
            return;
        }
        let (start, end) = (record.start_unix_nanos, record.end_unix_nanos);
        pending.retain(|event| {
            if start <= event.unix_nanos && event.unix_nanos <= end {
                span.events.events.push(Event::new(
                    Cow::Borrowed(event.name),
                    system_time(event.unix_nanos),
                    event.attributes.clone(),
                    0,
                ));
                false
            } else {
                true
            }
        });
    }
}

/// With allocator counters fed: what the driver holds beyond the allocator's pool, and
/// the part of the pool not allocated.
fn add_framework_attributes(span: &mut SpanData, record: &SpanRecord) {
    if let (Some(process), Some(reserved)) = (record.process_gpu, record.reserved_peak) {
        span.attributes.push(KeyValue::new(
            attr::GPU_MEMORY_NON_ALLOCATOR_PEAK,
            (process.peak - reserved).max(0),
        ));
    }
    if let (Some(allocated), Some(reserved)) = (record.allocated_peak, record.reserved_peak) {
        span.attributes.push(KeyValue::new(
            attr::GPU_ALLOCATOR_FRAGMENTATION_PEAK,
            (reserved - allocated).max(0),
        ));
    }
}

//! The memory budget: each device's peak on a span against its budget. A span over it gets
//! the event `gpu.memory.budget_exceeded` (one per device over), and optionally an error
//! status; the highest peak against its budget is kept for the summary's headroom line.

use opentelemetry::KeyValue;

use super::{span_label, Attributes, Counter, Detail, FindingKind, Setup, SpanRule};
use crate::diagnose::{Findings, Highest, Limits};
use crate::figures::device_attributes;
use crate::names::{attribute as attr, event};
use crate::record::{GpuId, SpanRecord};
use crate::util::bytes;

/// The kind of finding: a span whose peak went over the memory budget.
pub(crate) struct BudgetExceeded;

pub(super) const KIND: &dyn FindingKind = &BudgetExceeded;

impl FindingKind for BudgetExceeded {
    fn event(&self) -> &'static str {
        event::BUDGET_EXCEEDED
    }

    fn counter(&self) -> Counter {
        Counter {
            description: "Spans whose peak exceeded the memory budget",
            split: None,
        }
    }

    fn mark(&self, _: &dyn Attributes, _: Detail) -> String {
        "over budget".to_owned()
    }

    fn warning(&self, event: &dyn Attributes, record: &SpanRecord) -> Option<String> {
        let (index, peak, budget) = figures(event);
        Some(format!(
            "{} peaked at {peak} on gpu {index}, over the memory budget of {budget}",
            span_label(record),
        ))
    }

    /// No rule without a budget: the export thread then pays nothing for it.
    fn start(&self, setup: &Setup<'_>) -> Option<Box<dyn SpanRule>> {
        setup.settings.budget?;
        Some(Box::new(Budget {
            limits: setup.limits.clone(),
            error: setup.settings.budget_error,
        }))
    }
}

/// The event's device, peak and budget, as the warning and the error status write them.
fn figures(event: &dyn Attributes) -> (GpuId, String, String) {
    let figure = |key| bytes::human(event.int(key).unwrap_or_default());
    let number = |key| event.int(key).and_then(|v| u32::try_from(v).ok());
    let device = GpuId {
        index: number(attr::GPU_INDEX).unwrap_or_default(),
        mig: number(attr::GPU_MIG_INDEX),
    };
    (
        device,
        figure(attr::GPU_MEMORY_PEAK),
        figure(attr::GPU_MEMORY_BUDGET),
    )
}

/// The budget rule over one run.
struct Budget {
    limits: Limits,
    /// Whether a span over budget gets an error status.
    error: bool,
}

impl SpanRule for Budget {
    /// Compares each device's peak with its budget, and keeps the highest peak for the
    /// headroom line.
    fn on_span(&mut self, record: &SpanRecord, findings: &mut Findings) -> Vec<Vec<KeyValue>> {
        let mut over = Vec::new();
        // With several devices, each one's own peak; with one, the summed figure is its.
        if record.devices.is_empty() {
            if let (Some(gpu), 1) = (record.gpu, self.limits.devices.len()) {
                self.check(0, gpu.peak, record, findings, &mut over);
            }
        }
        for device in &record.devices {
            let position = self.limits.devices.iter().position(|l| l.id == device.id);
            if let (Some(position), Some(peak)) = (position, device.peak) {
                self.check(position, peak, record, findings, &mut over);
            }
        }
        over
    }

    fn error(&self, event: &dyn Attributes) -> Option<String> {
        self.error.then(|| {
            let (index, peak, budget) = figures(event);
            format!(
                "memory budget exceeded: peak {peak} over the budget of {budget} on gpu {index}"
            )
        })
    }
}

impl Budget {
    /// One device's peak against its budget: the highest for the headroom line, and an
    /// event in `over` when it is over.
    fn check(
        &self,
        position: usize,
        peak: i64,
        record: &SpanRecord,
        findings: &mut Findings,
        over: &mut Vec<Vec<KeyValue>>,
    ) {
        let device = &self.limits.devices[position];
        let Some(budget) = device.budget else {
            return;
        };
        let budget = i64::try_from(budget).unwrap_or(i64::MAX);
        let higher = findings
            .highest
            .as_ref()
            .is_none_or(|h| peak - budget > h.peak - h.budget);
        if higher {
            findings.highest = Some(Highest {
                device: device.id,
                peak,
                budget,
                span: span_label(record),
            });
        }
        if peak > budget {
            findings.over_budget += 1;
            let mut event: Vec<KeyValue> = device_attributes(device.id).collect();
            event.push(KeyValue::new(attr::GPU_MEMORY_PEAK, peak));
            event.push(KeyValue::new(attr::GPU_MEMORY_BUDGET, budget));
            over.push(event);
        }
    }
}

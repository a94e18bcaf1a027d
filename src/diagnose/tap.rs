//! The diagnosis tap: on the export thread, every closed span passes it before export. It
//! adds the driver-vs-framework attributes, applies the leak rules and the budget, feeds
//! the batch-size fit, and places the near-OOM events on the spans they belong to.

use std::borrow::Cow;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use opentelemetry::trace::{Event, Status};
use opentelemetry::KeyValue;
use opentelemetry_sdk::trace::SpanData;

use super::leak::{LeakDetector, LeakFinding, LeakRule};
use super::near_oom::{system_time, Recorder};
use super::{Counts, Findings, Limits};
use crate::export::tap::SpanTap;
use crate::names::{attribute as attr, event};
use crate::record::{Role, SpanRecord};
use crate::util::bytes;

pub(crate) struct DiagnoseTap {
    pub(crate) leaks: LeakDetector,
    pub(crate) limits: Limits,
    pub(crate) budget_error: bool,
    pub(crate) findings: Arc<Mutex<Findings>>,
    pub(crate) counts: Arc<Counts>,
    pub(crate) recorder: Option<Arc<Recorder>>,
    pub(crate) warned_leak: bool,
    pub(crate) warned_budget: bool,
    pub(crate) warned_batch_size: bool,
}

impl SpanTap for DiagnoseTap {
    fn on_span(&mut self, span: &mut SpanData, record: &SpanRecord) {
        add_framework_attributes(span, record);
        let shared = Arc::clone(&self.findings);
        let mut findings = shared
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let end = record.gpu.map(|m| m.end);
        match record.role {
            Role::Step(_) => {
                self.leaks.on_step(end);
                if let (Some(batch), Some(gpu)) = (record.batch_size, record.gpu) {
                    findings.fitter.add(batch, gpu.peak);
                }
                if record.batch_size_unreadable && !self.warned_batch_size {
                    self.warned_batch_size = true;
                    warn_batch_size(span, record);
                }
            }
            Role::Epoch(epoch) => {
                for finding in self.leaks.on_epoch(end) {
                    self.leak_found(span, epoch, &finding, &mut findings);
                }
            }
            Role::Other => {}
        }
        self.check_budget(span, record, &mut findings);
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
        .find(|kv| kv.key.as_str() == "batch_size")
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

impl DiagnoseTap {
    fn leak_found(
        &mut self,
        span: &mut SpanData,
        epoch: i64,
        finding: &LeakFinding,
        findings: &mut Findings,
    ) {
        let growth_key = match finding.rule {
            LeakRule::StepTrend => attr::GPU_MEMORY_LEAK_GROWTH_PER_STEP,
            _ => attr::GPU_MEMORY_LEAK_GROWTH_PER_EPOCH,
        };
        let attributes = vec![
            KeyValue::new(attr::GPU_MEMORY_LEAK_RULE, finding.rule.name()),
            KeyValue::new(growth_key, finding.growth),
            KeyValue::new(attr::GPU_MEMORY_LEAK_FIRST, finding.first),
            KeyValue::new(attr::GPU_MEMORY_LEAK_LAST, finding.last),
            KeyValue::new(attr::GPU_MEMORY_LEAK_POINTS, finding.points as i64),
        ];
        span.events.events.push(Event::new(
            event::LEAK_SUSPECTED,
            span.end_time,
            attributes,
            0,
        ));
        self.counts.leak[finding.rule as usize].fetch_add(1, Ordering::Relaxed);
        let unit = if finding.rule == LeakRule::StepTrend {
            "step"
        } else {
            "epoch"
        };
        let description = format!(
            "leak? {} +{}/{unit}",
            finding.rule.name(),
            bytes::human(finding.growth)
        );
        if !self.warned_leak {
            self.warned_leak = true;
            eprintln!(
                "gpuspan: warning: memory leak suspected at epoch {epoch}: end memory grows by \
                 {}/{unit} ({} to {} over {} {unit}s, {} rule)",
                bytes::human(finding.growth),
                bytes::human(finding.first),
                bytes::human(finding.last),
                finding.points,
                finding.rule.name()
            );
        }
        findings.marks.push((epoch, description));
    }

    /// Compares each device's peak with its budget, and keeps the highest peak for the
    /// headroom line.
    fn check_budget(&mut self, span: &mut SpanData, record: &SpanRecord, findings: &mut Findings) {
        // Per device with several devices; the summed figure is the one device's otherwise.
        let peaks: Vec<(usize, i64)> = if record.devices.is_empty() {
            match (record.gpu, self.limits.devices.len()) {
                (Some(gpu), 1) => vec![(0, gpu.peak)],
                _ => Vec::new(),
            }
        } else {
            record
                .devices
                .iter()
                .filter_map(|d| {
                    let position = self
                        .limits
                        .devices
                        .iter()
                        .position(|l| l.index == d.index)?;
                    Some((position, d.peak?))
                })
                .collect()
        };
        let mut over = Vec::new();
        for (position, peak) in peaks {
            let device = &self.limits.devices[position];
            let Some(budget) = device.budget else {
                continue;
            };
            let budget = i64::try_from(budget).unwrap_or(i64::MAX);
            let label = describe(record);
            let higher = findings
                .highest
                .as_ref()
                .is_none_or(|h| peak - budget > h.peak - h.budget);
            if higher {
                findings.highest = Some(super::Highest {
                    device: device.index,
                    peak,
                    budget,
                    span: label.clone(),
                });
            }
            if peak > budget {
                over.push((device.index, peak, budget));
            }
        }
        for &(index, peak, budget) in &over {
            span.events.events.push(Event::new(
                event::BUDGET_EXCEEDED,
                span.end_time,
                vec![
                    KeyValue::new(attr::GPU_INDEX, i64::from(index)),
                    KeyValue::new(attr::GPU_MEMORY_PEAK, peak),
                    KeyValue::new(attr::GPU_MEMORY_BUDGET, budget),
                ],
                0,
            ));
            self.counts.budget.fetch_add(1, Ordering::Relaxed);
            findings.over_budget += 1;
            if let Role::Epoch(epoch) = record.role {
                findings.marks.push((epoch, "over budget".to_owned()));
            }
            if !self.warned_budget {
                self.warned_budget = true;
                eprintln!(
                    "gpuspan: warning: {} peaked at {} on gpu {index}, over the memory budget \
                     of {}",
                    describe(record),
                    bytes::human(peak),
                    bytes::human(budget)
                );
            }
        }
        if let (true, Some(&(index, peak, budget))) = (self.budget_error, over.first()) {
            if !matches!(span.status, Status::Error { .. }) {
                span.status = Status::error(format!(
                    "memory budget exceeded: peak {} over the budget of {} on gpu {index}",
                    bytes::human(peak),
                    bytes::human(budget)
                ));
            }
        }
    }

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

/// `epoch 3`, `step 12`, or the span's name.
fn describe(record: &SpanRecord) -> String {
    match record.role {
        Role::Epoch(i) => format!("epoch {i}"),
        Role::Step(i) => format!("step {i}"),
        Role::Other => record.name.clone(),
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

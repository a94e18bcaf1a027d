//! What a crossing or an out-of-memory error becomes: the event's attributes, the file the
//! writer thread writes, and the alarm the job's other ranks read. Built alike for both, so a
//! near-OOM and an OOM say the same things in the same places.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use opentelemetry::KeyValue;

use super::file::Job;
use super::ring::{rise_start, Snapshot};
use super::{PendingEvent, Recorder};
use crate::diagnose::open_spans::OpenSpan;
use crate::diagnose::peers::Alarm;
use crate::figures::{device_attributes, int};
use crate::names::attribute as attr;

impl Recorder {
    /// One device's finding: its event's attributes (all but the file's name), the file's
    /// name, and what the file says.
    pub(super) fn finding(
        &self,
        ring: &Arc<Snapshot>,
        event: &'static str,
        device: usize,
        unix_nanos: u64,
        message: Option<&str>,
        open: &[OpenSpan],
    ) -> Finding {
        let used = ring.last_used(device);
        let limit = ring.total(device);
        let rise = rise_start(ring, device);
        let rise_span = rise.and_then(|(at, _)| self.open_spans.innermost_at(at));
        let name = self.file_name(unix_nanos);

        let mut attributes: Vec<KeyValue> = device_attributes(self.device_id(device)).collect();
        attributes.extend(used.map(|u| KeyValue::new(attr::GPU_MEMORY_USED, int(u))));
        attributes.extend(limit.map(|l| KeyValue::new(attr::GPU_MEMORY_LIMIT, int(l))));
        if let Some((_, from)) = rise {
            attributes.push(KeyValue::new(attr::GPU_MEMORY_RISE_FROM, int(from)));
        }
        if let Some(span) = &rise_span {
            attributes.push(KeyValue::new(attr::GPU_MEMORY_RISE_SPAN, span.label()));
        }
        if let Some(message) = message {
            attributes.push(KeyValue::new(attr::EXCEPTION_MESSAGE, message.to_owned()));
        }
        let what = match (message, used, limit) {
            (Some(message), _, _) => format!("out of memory ({message})"),
            (None, Some(used), Some(limit)) => format!(
                "gpu {} at {:.0}% of its memory ({} of {})",
                self.device_id(device),
                used as f64 / limit.max(1) as f64 * 100.0,
                crate::util::bytes::human(int(used)),
                crate::util::bytes::human(int(limit))
            ),
            _ => "near out of memory".to_owned(),
        };
        let path = self.run_dir.join(&name);
        let ids = (0..ring.devices().max(device + 1))
            .map(|i| self.device_id(i))
            .collect();
        let job = Job {
            warning: format!("gpuspan: warning: {what}; timeline in {}", path.display()),
            path,
            event,
            unix_nanos,
            message: message.map(str::to_owned),
            threshold: self.threshold,
            device,
            ids,
            used,
            limit,
            rise,
            rise_span: rise_span.as_ref().map(OpenSpan::label),
            open: open.to_vec(),
            ring: Arc::clone(ring),
        };
        Finding {
            attributes,
            name,
            job,
        }
    }

    /// What the job's other ranks are told of a finding on `device` (a job of several).
    pub(super) fn alarm(
        &self,
        ring: &Snapshot,
        event: &'static str,
        device: usize,
        unix_nanos: u64,
        open: &[OpenSpan],
    ) -> Option<Alarm> {
        self.board.as_ref().map(|board| Alarm {
            rank: board.rank(),
            host: board.host(),
            event: event.to_owned(),
            time_unix_nano: unix_nanos,
            gpu: self.device_id(device),
            epoch: innermost_index(open, attr::ML_EPOCH),
            step: innermost_index(open, attr::ML_STEP),
            peak: ring.peak(device),
            limit: ring.total(device),
        })
    }

    /// Counts a finding and leaves its event for the span open at its time; `timeline`
    /// names its file, when it gets one.
    pub(super) fn report(
        &self,
        event: &'static str,
        unix_nanos: u64,
        mut attributes: Vec<KeyValue>,
        timeline: Option<String>,
    ) {
        if let Some(name) = timeline {
            attributes.push(KeyValue::new(attr::GPU_MEMORY_TIMELINE, name));
        }
        let counter = self.counts.slot(event, &attributes);
        self.wait_for_span(PendingEvent {
            name: event,
            unix_nanos,
            attributes,
        });
        if let Some(counter) = counter {
            counter.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// One device's finding, before it is reported.
pub(super) struct Finding {
    pub(super) attributes: Vec<KeyValue>,
    pub(super) name: String,
    pub(super) job: Job,
}

/// How full `device` was at the ring's last reading, as a fraction of its total.
pub(super) fn fullness(ring: &Snapshot, device: usize) -> Option<f64> {
    Some(ring.last_used(device)? as f64 / ring.total(device)?.max(1) as f64)
}

/// The index (`ml.epoch` or `ml.step`) of the innermost open span that has one.
fn innermost_index(open: &[OpenSpan], key: &str) -> Option<i64> {
    open.iter()
        .rev()
        .find_map(|s| s.index.filter(|(k, _)| *k == key).map(|(_, i)| i))
}

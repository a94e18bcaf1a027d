//! Diagnosis read back from a run directory's spans, for `gpuspan report`: the marks the
//! epoch spans' events left, and the batch-size fit over the step spans.

use opentelemetry_proto::tonic::trace::v1::Span;

use super::batch_fit::BatchFitter;
use crate::names::event;
use crate::runlog::{Role, RunSummary, SpanRecord};

/// Collects what the summary needs while `read_run` walks the spans.
#[derive(Debug, Default)]
pub(crate) struct RunReader {
    marks: Vec<(i64, String)>,
    fitter: BatchFitter,
}

impl RunReader {
    /// One span from `traces.jsonl`.
    pub(crate) fn read(&mut self, span: &Span) {
        if span.name != "epoch" && span.name != "step" {
            return;
        }
        let record = SpanRecord::from_otlp(span);
        match record.role {
            Role::Step(_) => {
                if let (Some(batch), Some(gpu)) = (record.batch_size, record.gpu) {
                    self.fitter.add(batch, gpu.peak);
                }
            }
            Role::Epoch(epoch) => {
                for event in &span.events {
                    let mark = match event.name.as_str() {
                        event::LEAK_SUSPECTED => {
                            let rule = event
                                .attributes
                                .iter()
                                .find(|kv| kv.key == crate::names::attribute::GPU_MEMORY_LEAK_RULE)
                                .and_then(|kv| kv.value.as_ref())
                                .and_then(|v| match &v.value {
                                    Some(opentelemetry_proto::tonic::common::v1::any_value::Value::StringValue(s)) => Some(s.as_str()),
                                    _ => None,
                                })
                                .unwrap_or("?");
                            format!("leak? {rule}")
                        }
                        event::BUDGET_EXCEEDED => "over budget".to_owned(),
                        event::NEAR_OOM => "near OOM".to_owned(),
                        event::OOM => "OOM".to_owned(),
                        _ => continue,
                    };
                    self.marks.push((epoch, mark));
                }
            }
            Role::Other => {}
        }
    }

    /// Adds the marks and the batch-size fit, fitted to `limit` (see
    /// [`read_batch_limit`](super::read_batch_limit)) as the run's own fit is.
    pub(crate) fn finish(self, summary: &mut RunSummary, limit: Option<i64>) {
        summary.marks.extend(self.marks);
        summary.batch_fit = self.fitter.fit(limit);
        summary
            .notes
            .extend(super::batch_fit::summary_line(&self.fitter, limit));
    }
}

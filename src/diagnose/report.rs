//! Diagnosis read back from a run directory's spans, for `gpuspan report`: the diagnosis
//! events on every span (drawn as markers), the marks they leave on the epoch table, and the
//! batch-size fit over the step spans.

use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::trace::v1::Span;

use super::batch_fit::BatchFitter;
use super::rules::{self, oom_forecast, span_label, Detail};
use super::BatchFit;
use crate::names::event;
use crate::record::{Role, SpanRecord};

/// Span events drawn as markers.
pub const DIAGNOSIS_EVENTS: [&str; 6] = event::FINDINGS;

/// A diagnosis event found on a span.
#[derive(Debug, Clone, PartialEq)]
pub struct Marker {
    /// The event's name, one of [`DIAGNOSIS_EVENTS`].
    pub name: String,
    /// When it happened, UNIX ns.
    pub unix_nanos: u64,
    /// The span it is on (`step 12`, `epoch 3`, or the span's name).
    pub span: String,
    /// Its attributes, as text.
    pub attributes: Vec<(String, String)>,
}

/// Collects the findings while `read_run` walks the spans once.
#[derive(Debug, Default)]
pub(crate) struct RunReader {
    marks: Vec<(i64, String)>,
    markers: Vec<Marker>,
    fitter: BatchFitter,
    /// OOM forecasts read, and the first one's line.
    forecasts: u64,
    first_forecast: Option<String>,
}

impl RunReader {
    /// One span from `traces.jsonl`, with its record.
    pub(crate) fn read(&mut self, span: &Span, record: &SpanRecord) {
        if let (Role::Step(_), Some(batch), Some(gpu)) =
            (record.role, record.batch_size, record.gpu)
        {
            self.fitter.add(batch, gpu.peak);
        }
        for event in &span.events {
            let Some(kind) = rules::kind(&event.name) else {
                continue;
            };
            if let Role::Epoch(epoch) = record.role {
                let mark = kind.mark(&event.attributes, Detail::ReadBack);
                self.marks.push((epoch, mark));
            }
            if event.name == event::OOM_FORECAST {
                self.forecasts += 1;
                if self.first_forecast.is_none() {
                    let line = oom_forecast::describe(&event.attributes, &span_label(record));
                    self.first_forecast = Some(line);
                }
            }
            self.markers.push(Marker {
                name: event.name.clone(),
                unix_nanos: event.time_unix_nano,
                span: span_label(record),
                attributes: event
                    .attributes
                    .iter()
                    .map(|kv| {
                        let value = kv.value.as_ref().and_then(|v| v.value.as_ref());
                        (kv.key.clone(), text(value))
                    })
                    .collect(),
            });
        }
    }

    /// What was found, the batch-size fit fitted to `limit` (see
    /// [`read_batch_limit`](super::read_batch_limit)) as the run's own fit is.
    pub(crate) fn finish(mut self, limit: Option<i64>) -> ReadFindings {
        self.markers.sort_by_key(|m| m.unix_nanos);
        let forecast = self
            .first_forecast
            .map(|first| super::forecast_line(&first, self.forecasts));
        ReadFindings {
            marks: self.marks,
            batch_fit: self.fitter.fit(limit),
            notes: super::batch_fit::summary_line(&self.fitter, limit)
                .into_iter()
                .chain(forecast)
                .collect(),
            markers: self.markers,
        }
    }
}

/// The diagnosis a run directory's spans hold, for the epoch table and the report.
#[derive(Debug, Default)]
pub(crate) struct ReadFindings {
    /// Marks per epoch, `(epoch, what)`.
    pub(crate) marks: Vec<(i64, String)>,
    /// The batch-size fit.
    pub(crate) batch_fit: Option<BatchFit>,
    /// Lines printed under the table.
    pub(crate) notes: Vec<String>,
    /// Every diagnosis event, in time order.
    pub(crate) markers: Vec<Marker>,
}

fn text(value: Option<&Value>) -> String {
    match value {
        Some(Value::StringValue(s)) => s.clone(),
        Some(Value::IntValue(v)) => v.to_string(),
        Some(Value::DoubleValue(v)) => v.to_string(),
        Some(Value::BoolValue(v)) => v.to_string(),
        _ => String::new(),
    }
}

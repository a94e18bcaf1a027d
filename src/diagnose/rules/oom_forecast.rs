//! The OOM forecast: each device's step peaks against its limit (the budget where one is
//! set and below the device's or MIG instance's total, else that total; and the total once
//! the steps are past the budget). The limit less the device's use is the
//! headroom, so what other processes hold on the device is not the program's to grow into.
//! The step where the forecast first holds gets the event `gpu.memory.oom_forecast`, with
//! the steps left and the growth per step it used, once per crossing (`diagnose/forecast.rs`
//! says when it holds). With `GPUSPAN_MEMORY_FORECAST_STOP` it also asks the loop to stop,
//! through the budget's request.

use std::sync::Arc;

use opentelemetry::KeyValue;

use super::{span_label, Attributes, Counter, Detail, FindingKind, Setup, SpanRule};
use crate::diagnose::forecast::{Forecast, Forecaster};
use crate::diagnose::stop::StopRequest;
use crate::diagnose::{Findings, Limits};
use crate::figures::device_attributes;
use crate::names::{attribute as attr, event};
use crate::record::{GpuId, Role, SpanRecord};
use crate::util::bytes;

/// The kind of finding: the steps' peak is forecast to reach the limit.
pub(crate) struct OomForecast;

pub(super) const KIND: &dyn FindingKind = &OomForecast;

impl FindingKind for OomForecast {
    fn event(&self) -> &'static str {
        event::OOM_FORECAST
    }

    fn counter(&self) -> Counter {
        Counter {
            description: "Forecasts that the steps' peak reaches the memory limit",
            split: None,
        }
    }

    fn mark(&self, event: &dyn Attributes, detail: Detail) -> String {
        match (detail, event.int(attr::GPU_MEMORY_FORECAST_STEPS)) {
            (Detail::Live, Some(steps)) => format!("OOM in ~{steps} steps"),
            _ => "OOM forecast".to_owned(),
        }
    }

    fn warning(&self, event: &dyn Attributes, record: &SpanRecord) -> Option<String> {
        Some(describe(event, &span_label(record)))
    }

    fn start(&self, setup: &Setup<'_>) -> Option<Box<dyn SpanRule>> {
        let stop = setup.settings.forecast_stop.then(|| Arc::clone(setup.stop));
        Some(Box::new(ForecastRule {
            limits: setup.limits.clone(),
            devices: Vec::new(),
            stop,
        }))
    }
}

/// `step 33: out of memory in about 887 steps on gpu 0 (the steps' peak grows 64.0 MiB a
/// step; 55.4 GiB left of 80.0 GiB)`: the warning, the summary's line and the job's.
pub(crate) fn describe(event: &dyn Attributes, span: &str) -> String {
    let figure = |key| bytes::human(event.int(key).unwrap_or_default());
    let number = |key| event.int(key).and_then(|v| u32::try_from(v).ok());
    let device = GpuId {
        index: number(attr::GPU_INDEX).unwrap_or_default(),
        mig: number(attr::GPU_MIG_INDEX),
    };
    format!(
        "{span}: out of memory in about {} steps on gpu {device} (the steps' peak grows {} a \
         step; {} left of {})",
        event
            .int(attr::GPU_MEMORY_FORECAST_STEPS)
            .unwrap_or_default(),
        figure(attr::GPU_MEMORY_FORECAST_GROWTH_PER_STEP),
        figure(attr::GPU_MEMORY_FORECAST_HEADROOM),
        figure(attr::GPU_MEMORY_LIMIT),
    )
}

/// The forecast over one run: a forecaster per device.
struct ForecastRule {
    limits: Limits,
    devices: Vec<Forecaster>,
    /// The request to stop, with `GPUSPAN_MEMORY_FORECAST_STOP`.
    stop: Option<Arc<StopRequest>>,
}

impl SpanRule for ForecastRule {
    fn on_span(&mut self, record: &SpanRecord, findings: &mut Findings) -> Vec<Vec<KeyValue>> {
        if !matches!(record.role, Role::Step(_)) {
            return Vec::new();
        }
        if self.devices.len() != self.limits.devices.len() {
            self.devices
                .resize_with(self.limits.devices.len(), Forecaster::default);
        }
        // With several devices, each one's own peak; with one, the summed figure is its.
        let peaks: Vec<Option<i64>> = if record.devices.is_empty() {
            if self.limits.devices.len() != 1 {
                return Vec::new();
            }
            vec![record.gpu.map(|m| m.peak)]
        } else {
            self.limits
                .devices
                .iter()
                .map(|limit| {
                    let device = record.devices.iter().find(|d| d.id == limit.id)?;
                    device.peak
                })
                .collect()
        };
        let mut found = Vec::new();
        for ((forecaster, limit), peak) in
            self.devices.iter_mut().zip(&self.limits.devices).zip(peaks)
        {
            let bytes = |b: u64| i64::try_from(b).unwrap_or(i64::MAX);
            let (budget, total) = (limit.budget.map(bytes), limit.total.map(bytes));
            // The budget, unless the device runs out first; then, for a run already past
            // its budget, the device's total, where the out-of-memory error comes.
            let first = match (budget, total) {
                (Some(budget), Some(total)) => Some(budget.min(total)),
                _ => budget.or(total),
            };
            let ceilings: Vec<i64> = first
                .into_iter()
                .chain(total.filter(|t| Some(*t) != first))
                .collect();
            if ceilings.is_empty() {
                continue;
            }
            if let Some(forecast) = forecaster.on_step(peak, &ceilings) {
                found.push(attributes(limit.id, &forecast));
            }
        }
        if let Some(first) = found.first() {
            let line = describe(first, &span_label(record));
            findings.forecasts += found.len() as u64;
            if findings.first_forecast.is_none() {
                findings.first_forecast = Some(line.clone());
            }
            if let Some(stop) = &self.stop {
                stop.request(format!(
                    "gpuspan: {line} ({})",
                    crate::config::vars::GPUSPAN_MEMORY_FORECAST_STOP
                ));
            }
        }
        found
    }
}

/// The event's attributes.
fn attributes(device: GpuId, forecast: &Forecast) -> Vec<KeyValue> {
    let mut event: Vec<KeyValue> = device_attributes(device).collect();
    event.extend([
        KeyValue::new(
            attr::GPU_MEMORY_FORECAST_STEPS,
            i64::try_from(forecast.steps).unwrap_or(i64::MAX),
        ),
        KeyValue::new(
            attr::GPU_MEMORY_FORECAST_GROWTH_PER_STEP,
            forecast.growth_per_step,
        ),
        KeyValue::new(attr::GPU_MEMORY_FORECAST_HEADROOM, forecast.headroom()),
        KeyValue::new(attr::GPU_MEMORY_LIMIT, forecast.limit),
    ]);
    event
}

//! The builder's diagnosis settings (code beats the environment variable).

use std::time::Duration;

use super::Builder;
use crate::diagnose::settings::{self, MemoryBudget};

impl Builder {
    /// Memory a span may peak at on each device (else `GPUSPAN_MEMORY_BUDGET`, such as
    /// `20GiB` or `80%`). A span over it gets the event `gpu.memory.budget_exceeded`, and
    /// the summary says the headroom.
    pub fn memory_budget(mut self, budget: MemoryBudget) -> Self {
        self.diagnose.budget = Some(budget);
        self
    }

    /// Whether a span over the budget also gets an error status (else
    /// `GPUSPAN_MEMORY_BUDGET_ERROR`, else no).
    pub fn memory_budget_error(mut self, error: bool) -> Self {
        self.diagnose.budget_error = Some(error);
        self
    }

    /// Whether the first reading over the budget asks the training loop to stop (else
    /// `GPUSPAN_MEMORY_BUDGET_STOP`, else no): [`Telemetry::stop_requested`] then says why,
    /// and integrations such as gpuspan-burn stop their trainer at the end of the step.
    ///
    /// [`Telemetry::stop_requested`]: crate::Telemetry::stop_requested
    pub fn memory_budget_stop(mut self, stop: bool) -> Self {
        self.diagnose.budget_stop = Some(stop);
        self
    }

    /// Whether the first OOM forecast (the event `gpu.memory.oom_forecast`: the steps' peak
    /// grows steadily toward the limit) asks the training loop to stop, as the budget's
    /// stop does (else `GPUSPAN_MEMORY_FORECAST_STOP`, else no): [`Telemetry::stop_requested`]
    /// then says why. No budget is needed: the forecast runs toward the device's total.
    ///
    /// [`Telemetry::stop_requested`]: crate::Telemetry::stop_requested
    pub fn memory_forecast_stop(mut self, stop: bool) -> Self {
        self.diagnose.forecast_stop = Some(stop);
        self
    }

    /// The ratio rule's factor: a leak is suspected when an epoch ends with this many times
    /// the first epoch's memory (else `GPUSPAN_LEAK_RATIO`, else
    /// 1.5). Must be above 1.
    pub fn leak_ratio(mut self, ratio: f64) -> Self {
        self.diagnose.leak_ratio = Some(ratio);
        self
    }

    /// Epochs (and steps of each epoch) leak detection leaves out at the start, while
    /// caches and allocator pools fill (else `GPUSPAN_LEAK_WARMUP`, else
    /// 1).
    pub fn leak_warmup(mut self, epochs: usize) -> Self {
        self.diagnose.leak_warmup = Some(epochs);
        self
    }

    /// Fraction of a device's total (0 to 1) that counts as near out of memory (else
    /// `GPUSPAN_NEAR_OOM_THRESHOLD`, such as `95%`, else 0.95).
    pub fn near_oom_threshold(mut self, fraction: f64) -> Self {
        self.diagnose.near_oom_threshold = Some(fraction);
        self
    }

    /// How much of the sampled timeline the near-OOM recorder keeps (else
    /// `GPUSPAN_NEAR_OOM_WINDOW`, else 30 s).
    pub fn near_oom_window(mut self, window: Duration) -> Self {
        self.diagnose.near_oom_window = Some(window);
        self
    }
}

/// Resolves the builder's diagnosis settings against the environment.
pub(crate) fn resolve(
    code: &settings::DiagnoseCode,
) -> Result<settings::DiagnoseSettings, crate::error::InitError> {
    settings::resolve(code, crate::config::layered::process_var)
}

//! What diagnosis found, for the program itself: the batch-size fit, the findings so far,
//! and the request to stop the loop (the budget's or the OOM forecast's).

use super::Telemetry;

impl Telemetry {
    /// The batch-size fit over the step spans exported so far (flushed first): step peak
    /// memory as fixed + per-sample bytes × `batch_size`. `None` until steps with at
    /// least two batch sizes were exported, or when disabled.
    pub fn batch_fit(&self) -> Option<crate::diagnose::BatchFit> {
        let _ = self.flush();
        self.inner.as_ref()?.diagnosis.batch_fit()
    }

    /// How many diagnosis findings of one kind were made so far, by their event's name
    /// (`names::event::NEAR_OOM`, `names::event::LEAK_SUSPECTED`, ...): a program can react
    /// to one (save a memory snapshot) without reading spans. Findings made on spans count
    /// once the spans are exported; near-OOM crossings as the sampler sees them.
    pub fn findings(&self, event: &str) -> u64 {
        self.inner
            .as_ref()
            .map_or(0, |inner| inner.diagnosis.findings(event))
    }

    /// Why gpuspan asks the training loop to stop, once it does: with
    /// `GPUSPAN_MEMORY_BUDGET_STOP` (or
    /// [`Builder::memory_budget_stop`](crate::Builder::memory_budget_stop)), the first
    /// reading over a device's budget; with `GPUSPAN_MEMORY_FORECAST_STOP` (or
    /// [`Builder::memory_forecast_stop`](crate::Builder::memory_forecast_stop)), the first
    /// OOM forecast, seen once its step is exported. A loop of one's own checks it at the
    /// end of each step:
    ///
    /// ```
    /// # let telemetry = gpuspan::Telemetry::builder().disabled(true).build().unwrap();
    /// for step in 0..100u64 {
    ///     let _step = gpuspan::step_span!(step);
    ///     // ... forward, backward, optimizer step ...
    ///     if let Some(reason) = telemetry.stop_requested() {
    ///         eprintln!("{reason}");
    ///         break;
    ///     }
    /// }
    /// ```
    pub fn stop_requested(&self) -> Option<String> {
        self.inner.as_ref()?.diagnosis.stop_requested()
    }

    /// Whether a reading over the memory budget asks the training loop to stop
    /// (`GPUSPAN_MEMORY_BUDGET_STOP`, or
    /// [`Builder::memory_budget_stop`](crate::Builder::memory_budget_stop)): a loop whose
    /// ranks must stop together prepares for it. `false` when disabled.
    pub fn memory_budget_stop(&self) -> bool {
        self.inner
            .as_ref()
            .is_some_and(|inner| inner.diagnosis.budget_stop())
    }

    /// Whether an OOM forecast asks the training loop to stop
    /// (`GPUSPAN_MEMORY_FORECAST_STOP`, or
    /// [`Builder::memory_forecast_stop`](crate::Builder::memory_forecast_stop)): a loop
    /// whose ranks must stop together prepares for it. `false` when disabled.
    pub fn memory_forecast_stop(&self) -> bool {
        self.inner
            .as_ref()
            .is_some_and(|inner| inner.diagnosis.forecast_stop())
    }

    /// Calls `handler` with the reason when gpuspan asks the training loop to stop (see
    /// [`Telemetry::stop_requested`]), or at once if it has asked already; for a trainer
    /// that owns the loop and has a stop flag of its own. The handler runs on the sampler
    /// thread (the budget's) or the export thread (the forecast's) and must return at
    /// once: set the flag, nothing more. It is never called when disabled.
    pub fn on_stop_request(&self, handler: impl Fn(&str) + Send + Sync + 'static) {
        if let Some(inner) = &self.inner {
            inner.diagnosis.on_stop_request(Box::new(handler));
        }
    }
}

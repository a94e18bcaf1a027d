//! Stopping on the budget (`GPUSPAN_MEMORY_BUDGET_STOP`): the first reading over a device's
//! budget asks the training loop to stop. The OOM forecast
//! (`GPUSPAN_MEMORY_FORECAST_STOP`) makes the same request, from the export thread. gpuspan cannot stop a loop it does not own; it
//! records why, and calls the handlers a loop's owner registered (gpuspan-burn's sets
//! burn's interrupter), so the loop ends at its next check, the end of the step.
//!
//! The watch runs on the sampler thread: handlers must return at once (set a flag).

use std::sync::{Arc, Mutex, OnceLock};

use super::Limits;
use crate::config::vars::GPUSPAN_MEMORY_BUDGET_STOP;
use crate::timeline::{Tick, TickObserver};
use crate::util::bytes;
use crate::util::sync::lock;

/// A handler told why gpuspan asks the loop to stop.
type Handler = Box<dyn Fn(&str) + Send + Sync>;

/// The one request to stop of a run, and who to tell.
#[derive(Default)]
pub(crate) struct StopRequest {
    reason: OnceLock<String>,
    handlers: Mutex<Vec<Handler>>,
}

impl std::fmt::Debug for StopRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StopRequest")
            .field("reason", &self.reason.get())
            .finish_non_exhaustive()
    }
}

impl StopRequest {
    /// Why the loop was asked to stop, once it was.
    pub(crate) fn reason(&self) -> Option<&str> {
        self.reason.get().map(String::as_str)
    }

    /// Calls `handler` when the request is made, or now if it was made already.
    pub(crate) fn on_request(&self, handler: Handler) {
        let mut handlers = lock(&self.handlers);
        match self.reason.get() {
            Some(reason) => {
                drop(handlers);
                handler(reason);
            }
            None => handlers.push(handler),
        }
    }

    /// Makes the request (the first call only) and tells every handler.
    pub(crate) fn request(&self, reason: String) {
        let handlers = lock(&self.handlers);
        if self.reason.set(reason).is_ok() {
            if let Some(reason) = self.reason.get() {
                handlers.iter().for_each(|handler| handler(reason));
            }
        }
    }
}

/// The sampler observer that compares each device's reading with its budget.
pub(crate) struct BudgetWatch {
    pub(crate) limits: Arc<OnceLock<Limits>>,
    pub(crate) request: Arc<StopRequest>,
}

impl TickObserver for BudgetWatch {
    fn on_tick(&mut self, tick: &Tick<'_>) {
        if self.request.reason().is_some() {
            return;
        }
        let Some(limits) = self.limits.get() else {
            return;
        };
        let over = limits
            .devices
            .iter()
            .zip(tick.devices)
            .find_map(|(device, used)| match (device.budget, *used) {
                (Some(budget), Some(used)) if used > budget => Some((device.id, used, budget)),
                _ => None,
            });
        if let Some((index, used, budget)) = over {
            let figure = |b: u64| bytes::human(i64::try_from(b).unwrap_or(i64::MAX));
            self.request.request(format!(
                "gpuspan: gpu {index} reached {}, over the memory budget of {} \
                 ({GPUSPAN_MEMORY_BUDGET_STOP})",
                figure(used),
                figure(budget),
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diagnose::DeviceLimit;

    fn watch(budget: u64) -> (BudgetWatch, Arc<StopRequest>) {
        let limits = Arc::new(OnceLock::new());
        let _ = limits.set(Limits {
            devices: vec![DeviceLimit {
                id: crate::record::GpuId::gpu(2),
                total: Some(4 << 30),
                budget: Some(budget),
            }],
        });
        let request = Arc::new(StopRequest::default());
        let watch = BudgetWatch {
            limits,
            request: Arc::clone(&request),
        };
        (watch, request)
    }

    fn tick(devices: &[Option<u64>]) -> Tick<'_> {
        Tick::of_devices(0, devices)
    }

    #[test]
    fn the_first_reading_over_the_budget_tells_every_handler_once_with_the_device_and_figures() {
        let (mut watch, request) = watch(2 << 30);
        let told = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&told);
        request.on_request(Box::new(move |reason| lock(&sink).push(reason.to_owned())));

        watch.on_tick(&tick(&[Some(2 << 30)]));
        assert_eq!(request.reason(), None, "at the budget is not over it");
        watch.on_tick(&tick(&[Some(3 << 30)]));
        watch.on_tick(&tick(&[Some(4 << 30)]));

        let expected = "gpuspan: gpu 2 reached 3.0 GiB, over the memory budget of 2.0 GiB \
                        (GPUSPAN_MEMORY_BUDGET_STOP)";
        assert_eq!(request.reason(), Some(expected));
        assert_eq!(*lock(&told), vec![expected.to_owned()]);
    }

    #[test]
    fn a_handler_registered_after_the_request_is_told_at_once() {
        let (mut watch, request) = watch(1 << 30);
        watch.on_tick(&tick(&[None]));
        assert_eq!(request.reason(), None, "an unread device asks nothing");
        watch.on_tick(&tick(&[Some(2 << 30)]));
        let told = Arc::new(Mutex::new(0));
        let sink = Arc::clone(&told);
        request.on_request(Box::new(move |_| *lock(&sink) += 1));
        assert_eq!(*lock(&told), 1);
    }
}

//! The tracing layer that carries gpuspan's state inside a subscriber, so spans and counters
//! find the sampler of the subscriber they are recorded in, with no global.

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

use opentelemetry::metrics::Histogram;
use tracing_subscriber::Layer;

use crate::runlog::EpochSummary;
use crate::sampler::Shared;

/// Marker layer: gives spans and counters the state of the subscriber they run in.
#[derive(Debug, Clone)]
pub(crate) struct MemoryLayer(pub(crate) Arc<LayerState>);

/// What an open span needs: the sampler's state and the span-duration histograms.
#[derive(Debug)]
pub(crate) struct LayerState {
    pub(crate) shared: Arc<Shared>,
    /// `ml.step.duration`, one per meter provider.
    pub(crate) step_duration: Vec<Histogram<f64>>,
    /// `ml.epoch.duration`, one per meter provider.
    pub(crate) epoch_duration: Vec<Histogram<f64>>,
    /// Steps closed so far, to count each epoch's steps.
    pub(crate) steps_closed: AtomicU64,
    /// A row per closed epoch, for the summary printed at shutdown.
    pub(crate) epochs: Mutex<Vec<EpochSummary>>,
}

impl<S: tracing::Subscriber> Layer<S> for MemoryLayer {}

/// Runs `f` with the sampler state of the current subscriber, if it has a gpuspan layer.
pub(crate) fn with_current<R>(f: impl FnOnce(&Arc<Shared>) -> R) -> Option<R> {
    let state = current()?;
    Some(f(&state.shared))
}

/// The current subscriber's gpuspan state, if it has a gpuspan layer.
pub(crate) fn current() -> Option<Arc<LayerState>> {
    tracing::dispatcher::get_default(|dispatch| {
        dispatch
            .downcast_ref::<MemoryLayer>()
            .map(|layer| Arc::clone(&layer.0))
    })
}

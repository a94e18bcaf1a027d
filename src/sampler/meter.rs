//! The sampler measuring itself: what each kind of driver call cost and how far apart its
//! ticks came. The measurements go to a [`SelfMeter`] that the metrics module installs
//! once the meters exist (the sampler starts first), called from the sampler's threads.

use std::time::Duration;

use crate::names::sampler_call;

/// The kinds of driver call the sampler times.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Call {
    /// One device's memory read.
    Memory,
    /// One device's process list.
    Processes,
    /// One device's utilization read.
    Utilization,
    /// One round of energy, power and clock reads of every device.
    Power,
}

impl Call {
    pub(crate) const ALL: [Self; 4] = [
        Self::Memory,
        Self::Processes,
        Self::Utilization,
        Self::Power,
    ];

    /// The value of `gpuspan.sampler.call` on `gpuspan.sampler.read.duration`.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Self::Memory => sampler_call::MEMORY,
            Self::Processes => sampler_call::PROCESSES,
            Self::Utilization => sampler_call::UTILIZATION,
            Self::Power => sampler_call::POWER,
        }
    }
}

/// Receives the sampler's measurements of itself; must not block.
pub(crate) trait SelfMeter: Send + Sync + std::fmt::Debug + 'static {
    /// One call of `call` took `took`.
    fn read(&self, call: Call, took: Duration);
    /// Two ticks came `gap` apart.
    fn interval(&self, gap: Duration);
}

//! The collector's timeline and enrichment without the servers, for the benchmarks
//! (`benches/collect_enrich.rs`): nothing else reaches them from outside the crate.

use std::sync::Arc;
use std::time::Duration;

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;

use super::enrich::{Enriched, Enricher};
use super::timeline::Timelines;
use gpuspan::pipeline::Tick;
use gpuspan::source::GpuId;

/// A device timeline as the collector keeps it.
#[derive(Debug)]
pub struct Timeline {
    timelines: Arc<Timelines>,
    enricher: Enricher,
}

impl Timeline {
    /// `devices` devices sampled every `interval`.
    pub fn new(devices: u32, interval: Duration) -> Self {
        let ids: Vec<GpuId> = (0..devices).map(GpuId::gpu).collect();
        Self {
            enricher: Enricher::new("nvml", &ids),
            timelines: Arc::new(Timelines::new(ids, interval)),
        }
    }

    /// One tick: memory used per device at `unix_nanos`.
    pub fn push(&self, unix_nanos: u64, used: &[Option<u64>]) {
        self.timelines
            .record(&Tick::of_devices(unix_nanos, used), None, 0);
    }

    /// The peak of the devices' sum over a window.
    pub fn peak(&self, start: u64, end: u64) -> Option<u64> {
        let n = self.timelines.device_ids.len();
        self.timelines.devices_window(start, end)?.peak[n]
    }

    /// Bytes held.
    pub fn heap_bytes(&self) -> usize {
        self.timelines.heap_bytes()
    }

    /// Enriches every span of `request`; returns how many got figures.
    pub fn enrich(&self, request: &mut ExportTraceServiceRequest) -> u64 {
        let done: Enriched = self.enricher.request(request, &self.timelines);
        done.enriched
    }
}

//! A metric exporter wrapper: runs the inner exporter inside the export runtime and counts
//! the data points of every export that failed.

use std::sync::Arc;
use std::time::Duration;

use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::metrics::data::{AggregatedMetrics, MetricData, ResourceMetrics};
use opentelemetry_sdk::metrics::exporter::PushMetricExporter;
use opentelemetry_sdk::metrics::Temporality;

use super::health::ExportHealth;

/// Wraps `E`; see the module docs.
#[derive(Debug)]
pub(crate) struct CountingMetricExporter<E> {
    inner: E,
    runtime: Option<tokio::runtime::Handle>,
    health: Arc<ExportHealth>,
}

impl<E> CountingMetricExporter<E> {
    pub(crate) fn new(
        inner: E,
        runtime: Option<tokio::runtime::Handle>,
        health: Arc<ExportHealth>,
    ) -> Self {
        Self {
            inner,
            runtime,
            health,
        }
    }
}

impl<E: PushMetricExporter> PushMetricExporter for CountingMetricExporter<E> {
    fn export(
        &self,
        metrics: &ResourceMetrics,
    ) -> impl std::future::Future<Output = OTelSdkResult> + Send {
        // The periodic reader blocks on this future on its own thread: export right here,
        // inside the runtime, so the inner exporter has the reactor it needs.
        let result = super::block_on(self.runtime.as_ref(), self.inner.export(metrics));
        if let Err(error) = &result {
            self.health.lost(count_points(metrics), &error.to_string());
        }
        std::future::ready(result)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn temporality(&self) -> Temporality {
        self.inner.temporality()
    }
}

/// Number of data points in a collection.
pub(crate) fn count_points(metrics: &ResourceMetrics) -> u64 {
    fn points<T>(data: &MetricData<T>) -> usize {
        match data {
            MetricData::Gauge(g) => g.data_points().count(),
            MetricData::Sum(s) => s.data_points().count(),
            MetricData::Histogram(h) => h.data_points().count(),
            MetricData::ExponentialHistogram(h) => h.data_points().count(),
        }
    }
    let mut total = 0usize;
    for scope in metrics.scope_metrics() {
        for metric in scope.metrics() {
            total += match metric.data() {
                AggregatedMetrics::F64(d) => points(d),
                AggregatedMetrics::U64(d) => points(d),
                AggregatedMetrics::I64(d) => points(d),
            };
        }
    }
    total as u64
}

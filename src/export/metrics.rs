//! A metric exporter wrapper: runs the inner exporter inside the export runtime, retries a
//! failed export with backoff (100 ms doubling to 5 s) until the next collection is due, and
//! counts every data point as delivered or lost. This is the only retry of metric exports.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

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
    /// How long one collection may be retried: the export interval.
    retry_for: Duration,
    /// Set at shutdown: one attempt, no retries. The OTLP exporter under it does not retry
    /// on its own (`otlp::configure!`), so an attempt is one request.
    stopping: Arc<AtomicBool>,
}

impl<E> CountingMetricExporter<E> {
    pub(crate) fn new(
        inner: E,
        runtime: Option<tokio::runtime::Handle>,
        health: Arc<ExportHealth>,
        retry_for: Duration,
        stopping: Arc<AtomicBool>,
    ) -> Self {
        Self {
            inner,
            runtime,
            health,
            retry_for,
            stopping,
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
        let points = count_points(metrics);
        self.health.produced(points);
        let give_up = Instant::now() + self.retry_for;
        let mut backoff = Duration::from_millis(100);
        let result = loop {
            let result = super::block_on(self.runtime.as_ref(), self.inner.export(metrics));
            match &result {
                Ok(()) => {
                    self.health.delivered(points);
                    break result;
                }
                Err(error) => {
                    let next = Instant::now() + backoff;
                    if self.stopping.load(Ordering::Relaxed) || next >= give_up {
                        self.health.lost(points, &error.to_string());
                        break result;
                    }
                    self.health.failed(&error.to_string());
                    std::thread::sleep(backoff);
                    backoff = (backoff * 2).min(Duration::from_secs(5));
                }
            }
        };
        self.health.warn_once();
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

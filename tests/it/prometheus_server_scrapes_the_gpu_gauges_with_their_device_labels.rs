//! A real Prometheus server (Debian's) scraping gpuspan's optional endpoint stores the GPU
//! gauges under the names and labels the dashboard in collector/ queries, with the exact
//! values, and keeps a spike that happened between two scrapes through gpu_memory_peak_bytes.

use gpuspan_test_support as support;

use std::time::Duration;

use gpuspan::Telemetry;

use gpuspan::settings::Exporter;
use serde_json::Value;
use support::prometheus_server::{value, Prometheus};
use support::scripted::scripted;

const MB: u64 = 1 << 20;

fn for_device<'a>(series: &'a [Value], uuid: &str) -> &'a Value {
    series
        .iter()
        .find(|s| s["metric"]["hw_id"] == uuid)
        .unwrap_or_else(|| panic!("no series for {uuid} in {series:?}"))
}

#[test]
fn usage_limit_and_the_peak_between_scrapes_reach_prometheus() {
    // Two devices; device 1 spikes to 900 MB and falls back before the first scrape.
    let (source, script) = scripted(2, 300 * MB);
    let builder = Telemetry::builder()
        .memory_source(source)
        .sample_interval(Duration::from_millis(2))
        .traces_exporter(Exporter::None)
        .metrics_exporter(Exporter::None)
        .run_id("prometheus-run")
        .summary(false)
        .prometheus_addr("127.0.0.1:0".parse().unwrap());
    let (telemetry, ()) = support::setup::run(builder, |_| {
        let _s = gpuspan::step_span!(0);
        script.set(1, 900 * MB);
        script.wait_reads(3);
        script.set(1, 200 * MB);
        script.wait_reads(3);
    });
    let target = telemetry.prometheus_addr().expect("the endpoint is up");

    let dir = tempfile::tempdir().unwrap();
    let mut prometheus = Prometheus::scraping(target, Duration::from_secs(2), &[], dir.path());
    let usage = prometheus.wait_for_series(
        "hw_gpu_memory_usage_bytes series for both devices",
        "hw_gpu_memory_usage_bytes",
        2,
    );
    assert_eq!(usage.len(), 2, "{usage:?}");
    for (index, used) in [(0, 300 * MB), (1, 200 * MB)] {
        let series = for_device(&usage, &format!("GPU-scripted-{index}"));
        let labels = &series["metric"];
        assert_eq!(labels["gpu_index"], index.to_string(), "{series}");
        assert_eq!(labels["hw_type"], "gpu", "{series}");
        assert_eq!(labels["hw_vendor"], "NVIDIA", "{series}");
        assert_eq!(labels["job"], "gpuspan", "{series}");
        assert_eq!(value(series), used as f64, "{series}");
    }

    let limit = prometheus
        .query("hw_gpu_memory_limit_bytes", 2)
        .expect("the limit is stored");
    for series in &limit {
        assert_eq!(value(series), (80u64 << 30) as f64, "{series}");
    }

    // The first scrape's window held the spike: the peak series has it, the usage never did.
    let peak = prometheus
        .query(
            "max_over_time(gpu_memory_peak_bytes{hw_id=\"GPU-scripted-1\"}[10m])",
            1,
        )
        .expect("gpu_memory_peak_bytes is stored");
    assert_eq!(value(&peak[0]), (900 * MB) as f64, "{peak:?}");
    let usage_max = prometheus
        .query(
            "max_over_time(hw_gpu_memory_usage_bytes{hw_id=\"GPU-scripted-1\"}[10m])",
            1,
        )
        .expect("usage is stored");
    assert_eq!(value(&usage_max[0]), (200 * MB) as f64, "{usage_max:?}");

    drop(prometheus);
    telemetry.shutdown().unwrap();
}

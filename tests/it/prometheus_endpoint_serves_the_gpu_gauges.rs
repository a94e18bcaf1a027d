//! The optional Prometheus endpoint serves the GPU gauges with their device labels, on
//! loopback, and keeps its own peak window apart from the OTLP exporter's.

use gpuspan_test_support as support;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use gpuspan::Telemetry;

use gpuspan::settings::Exporter;
use support::scripted::scripted;

const MB: u64 = 1 << 20;

fn get(addr: std::net::SocketAddr, path: &str) -> String {
    let mut stream = TcpStream::connect(addr).unwrap();
    write!(stream, "GET {path} HTTP/1.1\r\nHost: {addr}\r\n\r\n").unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    response
}

#[test]
fn scrapes_see_usage_limit_and_peak_per_device() {
    let (source, script) = scripted(2, 100 * MB);
    let builder = Telemetry::builder()
        .memory_source(source)
        .sample_interval(Duration::from_millis(2))
        .traces_exporter(Exporter::None)
        .metrics_exporter(Exporter::None)
        .prometheus_addr("127.0.0.1:0".parse().unwrap());
    let (telemetry, ()) = support::setup::run(builder, |_| {
        let _s = gpuspan::step_span!(0);
        script.set(1, 900 * MB);
        script.wait_reads(2);
        script.set(1, 200 * MB);
        script.wait_reads(2);
    });
    let addr = telemetry.prometheus_addr().expect("the endpoint is up");
    assert!(addr.ip().is_loopback());

    let first = get(addr, "/metrics");
    assert!(first.starts_with("HTTP/1.1 200 OK"), "{first}");
    let usage = "hw_gpu_memory_usage_bytes{gpu_index=\"1\",hw_id=\"GPU-scripted-1\",hw_name=\"Scripted GPU\",hw_type=\"gpu\",hw_vendor=\"NVIDIA\"";
    assert!(first.contains(usage), "{first}");
    let line = |text: &str, prefix: &str| -> f64 {
        text.lines()
            .find(|l| l.starts_with(prefix) && l.contains("hw_id=\"GPU-scripted-1\""))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {prefix} line for device 1 in\n{text}"))
    };
    assert_eq!(line(&first, "hw_gpu_memory_usage_bytes"), (200 * MB) as f64);
    assert_eq!(line(&first, "gpu_memory_peak_bytes"), (900 * MB) as f64);
    assert_eq!(
        line(&first, "hw_gpu_memory_limit_bytes"),
        (80u64 << 30) as f64
    );
    assert!(first.contains("ml_step_duration_seconds_count"), "{first}");

    // The next scrape starts a new window: the spike is behind it.
    let second = get(addr, "/metrics");
    assert_eq!(line(&second, "gpu_memory_peak_bytes"), (200 * MB) as f64);

    assert!(get(addr, "/other").starts_with("HTTP/1.1 404"));
    telemetry.shutdown().unwrap();
    assert!(
        TcpStream::connect(addr).is_err(),
        "the endpoint stops with the telemetry"
    );
}

//! `gpuspan collect` receives OTLP/JSON over HTTP, writes the span with its GPU memory to
//! the run directory, and on SIGTERM stops and prints what it did.

use gpuspan_test_support as support;

use std::io::BufReader;
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use support::fake_nvml::{FakeNvml, MIB};
use support::raw_http::post;

#[test]
fn a_json_span_gets_the_devices_memory_and_sigterm_stops_the_collector() {
    let fake = FakeNvml::build();
    let dir = tempfile::tempdir().unwrap();
    let port = support::receiver::unused_port();
    let mut collector = Command::new(env!("CARGO_BIN_EXE_gpuspan"))
        .args([
            "collect",
            "--grpc",
            "off",
            "--http",
            &format!("127.0.0.1:{port}"),
        ])
        .current_dir(dir.path())
        .env("GPUSPAN_NVML_LIB", fake.path())
        .env("GPUSPAN_RUN_DIR", dir.path().join("runs"))
        .env("FAKE_NVML_DEVICES", "2")
        .env("FAKE_NVML_USED_MIB", "1500")
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(collector.stderr.take().unwrap());
    let line = support::collector_process::read_banner(&mut stderr).unwrap();
    assert!(
        line.contains(&format!("HTTP on 127.0.0.1:{port}")),
        "{line}"
    );

    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    std::thread::sleep(Duration::from_millis(60));
    let body = serde_json::json!({
        "resourceSpans": [{
            "resource": {"attributes": [
                {"key": "service.name", "value": {"stringValue": "inference"}}
            ]},
            "scopeSpans": [{"spans": [{
                "traceId": "5b8efff798038103d269b633813fc60c",
                "spanId": "eee19b7ec3c1b174",
                "name": "generate",
                "kind": 2,
                "startTimeUnixNano": now.to_string(),
                "endTimeUnixNano": (now + 50_000_000).to_string()
            }]}]
        }]
    });
    let reply = post(
        collector_addr(port),
        "/v1/traces",
        &[("Content-Type", "application/json")],
        body.to_string().as_bytes(),
    );
    assert_eq!(reply.status, 200, "{reply:?}");
    assert_eq!(reply.header("content-type"), Some("application/json"));

    // SAFETY: signalling our own child process.
    assert_eq!(
        unsafe { libc::kill(collector.id() as libc::pid_t, libc::SIGTERM) },
        0
    );
    let status = collector.wait().unwrap();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stderr, &mut rest).unwrap();
    assert!(status.success(), "{status}: {rest}");
    assert!(
        rest.contains("1 spans received, 1 given GPU memory"),
        "{rest}"
    );

    let run = std::fs::read_dir(dir.path().join("runs"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let traces = std::fs::read_to_string(run.join("traces.jsonl")).unwrap();
    let request: serde_json::Value = serde_json::from_str(traces.lines().next().unwrap()).unwrap();
    let span = &request["resourceSpans"][0]["scopeSpans"][0]["spans"][0];
    assert_eq!(span["name"], "generate");
    let attr = |key: &str| -> Option<i64> {
        span["attributes"]
            .as_array()?
            .iter()
            .find(|kv| kv["key"] == key)?["value"]["intValue"]
            .as_str()?
            .parse()
            .ok()
    };
    let (two, one) = (3000 * MIB as i64, 1500 * MIB as i64);
    assert_eq!(attr("gpu.memory.start"), Some(two), "{span:#}");
    assert_eq!(attr("gpu.memory.peak"), Some(two));
    assert_eq!(attr("gpu.memory.end"), Some(two));
    assert_eq!(attr("gpu.memory.delta"), Some(0));
    assert_eq!(attr("gpu.0.memory.peak"), Some(one));
    assert_eq!(attr("gpu.1.memory.peak"), Some(one));
    assert!(metrics_written(&run), "the collector's own gauges");
}

fn collector_addr(port: u16) -> std::net::SocketAddr {
    ([127, 0, 0, 1], port).into()
}

fn metrics_written(run: &std::path::Path) -> bool {
    std::fs::read_to_string(run.join("metrics.jsonl"))
        .is_ok_and(|text| text.contains("hw.gpu.memory.usage"))
}

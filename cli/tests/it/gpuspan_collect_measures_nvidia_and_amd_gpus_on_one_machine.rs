//! `gpuspan collect` on a machine with an NVIDIA GPU (the fake NVML) and an AMD GPU (a
//! written sysfs tree) measures both: a span received gets the sum of the two devices and
//! each device's own figure, and says that both sources were read.

use gpuspan_test_support as support;

use std::io::BufReader;
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use support::fake_nvml::{FakeNvml, MIB};
use support::raw_http::post;

/// An amdgpu card with 6 GiB of its memory in use (`mem_info_vram_used`).
const AMD_TREE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../tests/fixtures/drm/amdgpu-old-keys/sys"
);
const AMD_USED: i64 = 6 << 30;

#[test]
fn a_span_gets_the_memory_of_the_nvidia_and_the_amd_gpu() {
    let fake = FakeNvml::build();
    let dir = tempfile::tempdir().unwrap();
    let procfs = tempfile::tempdir().unwrap();
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
        .env("GPUSPAN_SYSFS_ROOT", AMD_TREE)
        .env("GPUSPAN_PROCFS_ROOT", procfs.path())
        .env("GPUSPAN_RUN_DIR", dir.path().join("runs"))
        .env("FAKE_NVML_DEVICES", "1")
        .env("FAKE_NVML_USED_MIB", "1500")
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .env_remove("CUDA_VISIBLE_DEVICES")
        .env_remove("ROCR_VISIBLE_DEVICES")
        .env_remove("HIP_VISIBLE_DEVICES")
        .env_remove("GPUSPAN_DEVICES")
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
        ([127, 0, 0, 1], port).into(),
        "/v1/traces",
        &[("Content-Type", "application/json")],
        body.to_string().as_bytes(),
    );
    assert_eq!(reply.status, 200, "{reply:?}");

    // SAFETY: signalling our own child process.
    assert_eq!(
        unsafe { libc::kill(collector.id() as libc::pid_t, libc::SIGTERM) },
        0
    );
    let status = collector.wait().unwrap();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stderr, &mut rest).unwrap();
    assert!(status.success(), "{status}: {rest}");

    let run = std::fs::read_dir(dir.path().join("runs"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let traces = std::fs::read_to_string(run.join("traces.jsonl")).unwrap();
    let request: serde_json::Value = serde_json::from_str(traces.lines().next().unwrap()).unwrap();
    let span = &request["resourceSpans"][0]["scopeSpans"][0]["spans"][0];
    let value = |key: &str| {
        span["attributes"]
            .as_array()
            .and_then(|kvs| kvs.iter().find(|kv| kv["key"] == key))
            .map(|kv| kv["value"].clone())
    };
    let int = |key: &str| -> Option<i64> { value(key)?["intValue"].as_str()?.parse().ok() };
    let nvidia = 1500 * MIB as i64;
    assert_eq!(
        value("gpu.memory.source").and_then(|v| v["stringValue"].as_str().map(str::to_owned)),
        Some("nvml+amdgpu-sysfs".to_owned()),
        "{span:#}"
    );
    assert_eq!(int("gpu.0.memory.peak"), Some(nvidia), "{span:#}");
    assert_eq!(int("gpu.1.memory.peak"), Some(AMD_USED), "{span:#}");
    assert_eq!(int("gpu.memory.peak"), Some(nvidia + AMD_USED));
    assert_eq!(int("gpu.memory.start"), Some(nvidia + AMD_USED));
    assert_eq!(int("gpu.memory.end"), Some(nvidia + AMD_USED));
}

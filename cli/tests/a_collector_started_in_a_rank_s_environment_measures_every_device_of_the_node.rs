// A test binary of its own: it sets PATH and LOCAL_RANK, which the whole process reads.
//! `gpuspan collect` measures the node, whatever environment it starts in: under a
//! launcher's `LOCAL_RANK`, with NVML missing and `nvidia-smi` the only source, a span it
//! receives still gets the figures of every device, not only the rank's.

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use gpuspan_test_support as support;

use gpuspan_cli::collect::Collector;
use support::otlp_json::{one_span, send, unix_nanos};
use support::traces::read_spans;

/// Two H100s, as `nvidia-smi --query-gpu` lists them.
const TWO_GPUS: &str = "\
0, GPU-5f8e3a7c-2b1d-4e6f-9a0b-c3d4e5f60718, NVIDIA H100 80GB HBM3, 71234, 81559, 98
1, GPU-0a1b2c3d-4e5f-6071-8293-a4b5c6d7e8f9, NVIDIA H100 80GB HBM3, 70988, 81559, 97
";

/// The attribute keys of every span written under `runs`.
fn span_keys(runs: &std::path::Path) -> Vec<Vec<String>> {
    let mut spans = Vec::new();
    for run in std::fs::read_dir(runs).unwrap() {
        let run = run.unwrap().path();
        let files = [run.join("traces.jsonl"), run.join("rank-1/traces.jsonl")];
        for span in files.iter().flat_map(|file| read_spans(file)) {
            let keys = span["attributes"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .map(|kv| kv["key"].as_str().unwrap().to_owned())
                        .collect()
                })
                .unwrap_or_default();
            spans.push(keys);
        }
    }
    spans
}

#[test]
fn a_span_gets_both_devices_figures_under_local_rank_1() {
    let bin = tempfile::tempdir().unwrap();
    let smi = bin.path().join("nvidia-smi");
    std::fs::write(&smi, format!("#!/bin/sh\ncat <<'EOF'\n{TWO_GPUS}EOF\n")).unwrap();
    std::fs::set_permissions(&smi, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = format!(
        "{}:{}",
        bin.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    // The only test in this file: the process environment is its own.
    std::env::set_var("PATH", path);
    std::env::set_var("LOCAL_RANK", "1");
    let runs = tempfile::tempdir().unwrap();
    let collector = Collector::builder()
        .grpc_addr(None)
        .http_addr(Some("127.0.0.1:0".parse().unwrap()))
        .nvml_lib(bin.path().join("no-libnvidia-ml.so.1"))
        .run_dir(runs.path())
        .start()
        .unwrap();
    let start = unix_nanos();
    std::thread::sleep(Duration::from_millis(1200));
    let end = unix_nanos();
    send(
        collector.http_addr().unwrap(),
        &one_span("generate", start, end),
    );
    let stats = collector.shutdown(Duration::from_secs(5));
    assert_eq!(stats.spans_forwarded, 1, "{stats:?}");
    let spans = span_keys(runs.path());
    assert_eq!(spans.len(), 1, "{spans:?}");
    for key in ["gpu.0.memory.peak", "gpu.1.memory.peak"] {
        assert!(
            spans[0].iter().any(|k| k == key),
            "{key} missing: the collector measured only the rank's device: {:?}",
            spans[0]
        );
    }
}

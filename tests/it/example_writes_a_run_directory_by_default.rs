//! The main job: `train` with no collector writes OTLP/JSON files into the run directory and
//! prints a per-epoch table; with the fake NVML it shows GPU columns.

use gpuspan_test_support as support;

use std::path::Path;

use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::trace::v1::Span;
use support::example::{int, read_spans, run_train};
use support::fake_nvml::FakeNvml;

fn metric_names(dir: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(dir.join("metrics.jsonl")).unwrap();
    let mut names = Vec::new();
    for line in text.lines() {
        let request: ExportMetricsServiceRequest = serde_json::from_str(line).unwrap();
        for resource in request.resource_metrics {
            for scope in resource.scope_metrics {
                names.extend(scope.metrics.into_iter().map(|m| m.name));
            }
        }
    }
    names
}

#[test]
fn without_a_gpu_it_records_host_memory_and_prints_the_table() {
    let root = tempfile::tempdir().unwrap();
    let out = run_train(
        &["--epochs", "3", "--steps", "4", "--batch-size", "32"],
        &[
            ("GPUSPAN_RUN_DIR", root.path().to_str().unwrap()),
            ("GPUSPAN_RUN_ID", "no-gpu"),
            ("GPUSPAN_NVML_LIB", "/nonexistent/libnvidia-ml.so.1"),
        ],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(
        stdout.lines().filter(|l| l.starts_with("epoch ")).count(),
        3,
        "{stdout}"
    );
    assert_eq!(
        stderr.matches("no GPU memory source").count(),
        1,
        "one clear warning: {stderr}"
    );
    assert!(
        stderr.contains("epoch  steps  duration  host start  host peak  host end"),
        "{stderr}"
    );
    assert!(
        !stderr.contains("gpu peak"),
        "no GPU columns without a GPU: {stderr}"
    );

    let dir = root.path().join("no-gpu");
    let spans = read_spans(&dir);
    let epochs: Vec<&Span> = spans.iter().filter(|s| s.name == "epoch").collect();
    let mut numbers: Vec<i64> = epochs.iter().filter_map(|s| int(s, "ml.epoch")).collect();
    numbers.sort_unstable();
    assert_eq!(numbers, vec![0, 1, 2], "one epoch span per epoch");
    for epoch in &epochs {
        let peak = int(epoch, "process.memory.peak").expect("host memory peak");
        assert!(peak >= int(epoch, "process.memory.start").unwrap());
        assert!(
            int(epoch, "gpu.memory.peak").is_none(),
            "no host memory under a gpu. name"
        );
        let steps = spans
            .iter()
            .filter(|s| s.name == "step" && s.parent_span_id == epoch.span_id)
            .count();
        assert_eq!(steps, 4);
    }
    let names = metric_names(&dir);
    assert!(
        names.contains(&"process.memory.usage".to_owned()),
        "{names:?}"
    );
    assert!(names.contains(&"ml.step.duration".to_owned()), "{names:?}");
}

#[test]
fn with_the_fake_nvml_the_summary_has_gpu_columns() {
    let fake = FakeNvml::build();
    let root = tempfile::tempdir().unwrap();
    let out = run_train(
        &["--epochs", "2", "--steps", "3", "--batch-size", "32"],
        &[
            ("GPUSPAN_RUN_DIR", root.path().to_str().unwrap()),
            ("GPUSPAN_RUN_ID", "fake-gpu"),
            ("GPUSPAN_NVML_LIB", fake.path().to_str().unwrap()),
            ("FAKE_NVML_DEVICES", "2"),
            ("FAKE_NVML_USED_MIB", "2048"),
            ("FAKE_NVML_PROCESS_MIB", "512"),
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("gpu start  gpu peak  gpu end  gpu delta"),
        "{stderr}"
    );
    assert!(
        stderr.contains("4.0 GiB"),
        "two devices of 2 GiB each: {stderr}"
    );
    assert!(stderr.contains("read through nvml"), "{stderr}");
    let spans = read_spans(&root.path().join("fake-gpu"));
    let epoch = spans.iter().find(|s| s.name == "epoch").unwrap();
    assert_eq!(int(epoch, "gpu.memory.peak"), Some(4096 << 20));
    assert_eq!(int(epoch, "gpu.0.memory.peak"), Some(2048 << 20));
    assert_eq!(int(epoch, "gpu.process.memory.peak"), Some(512 << 20));
}

//! A device that NVML reports lost at every reading is warned about once on standard
//! error, not once per sample, while the run goes on and the other device keeps reporting.
//! (Standard error is the `train` example's, run as a separate process.)

use gpuspan_test_support as support;

use support::example::{int, read_spans, run_train};
use support::fake_nvml::FakeNvml;

#[test]
fn a_device_lost_at_every_sample_is_warned_about_once() {
    let fake = FakeNvml::build();
    let root = tempfile::tempdir().unwrap();
    let out = run_train(
        &["--epochs", "2", "--steps", "20", "--batch-size", "64"],
        &[
            ("GPUSPAN_RUN_DIR", root.path().to_str().unwrap()),
            ("GPUSPAN_RUN_ID", "lost-gpu"),
            ("GPUSPAN_NVML_LIB", fake.path().to_str().unwrap()),
            ("GPUSPAN_SAMPLE_INTERVAL", "1ms"),
            ("FAKE_NVML_DEVICES", "2"),
            ("FAKE_NVML_USED_MIB", "2048"),
            ("FAKE_NVML_FAIL", "nvmlDeviceGetMemoryInfo_v2:15:1"),
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "a lost device does not fail the run: {stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");

    // Many samples hit the lost device...
    let spans = read_spans(&root.path().join("lost-gpu"));
    let samples: i64 = spans
        .iter()
        .filter(|s| s.name == "epoch")
        .filter_map(|s| int(s, "gpu.memory.samples"))
        .sum();
    assert!(samples >= 5, "too short a run to tell: {samples} samples");
    // ...and one warning says so.
    let warnings: Vec<&str> = stderr
        .lines()
        .filter(|line| line.contains("warning") && line.contains("gpu 1"))
        .collect();
    assert_eq!(warnings.len(), 1, "{warnings:#?}\n{stderr}");
    assert!(
        warnings[0].to_lowercase().contains("lost"),
        "{}",
        warnings[0]
    );
    assert!(
        !stderr
            .lines()
            .any(|l| l.contains("warning") && l.contains("gpu 0")),
        "the working device is not warned about: {stderr}"
    );

    // Device 0 kept reporting: GPU columns, and its memory on every epoch.
    assert!(stderr.contains("gpu peak"), "{stderr}");
    for epoch in spans.iter().filter(|s| s.name == "epoch") {
        assert_eq!(int(epoch, "gpu.memory.peak"), Some(2048 << 20));
        assert_eq!(int(epoch, "gpu.0.memory.peak"), Some(2048 << 20));
        assert_eq!(int(epoch, "gpu.1.memory.peak"), None);
    }
}

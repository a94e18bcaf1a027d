//! The `train` example on a fake device that is 97 % full: one warning line names the
//! device and the file, and `near-oom-<time>.json` is in the run directory when the
//! process has exited.

use gpuspan_test_support as support;

use support::example::run_train;
use support::fake_nvml::FakeNvml;

#[test]
fn a_nearly_full_device_is_warned_about_once_with_its_timeline_file() {
    let fake = FakeNvml::build();
    let root = tempfile::tempdir().unwrap();
    let out = run_train(
        &["--epochs", "2", "--steps", "3"],
        &[
            ("GPUSPAN_RUN_DIR", root.path().to_str().unwrap()),
            ("GPUSPAN_RUN_ID", "full"),
            ("GPUSPAN_NVML_LIB", fake.path().to_str().unwrap()),
            ("FAKE_NVML_TOTAL_MIB", "100000"),
            ("FAKE_NVML_USED_MIB", "97000"),
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let dir = root.path().join("full");
    let files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with("near-oom-"))
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    let warnings: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("of its memory"))
        .collect();
    assert_eq!(
        warnings,
        [format!(
            "gpuspan: warning: gpu 0 at 97% of its memory (94.7 GiB of 97.7 GiB); timeline in {}",
            dir.join(&files[0]).display()
        )],
        "{stderr}"
    );
    assert!(
        stderr.contains("near-OOM: 1 crossing(s) of 95%"),
        "{stderr}"
    );
}

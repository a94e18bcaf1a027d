//! The `train` example with a memory budget and two batch sizes, on the fake NVML: the
//! summary at exit says the headroom under the budget and the batch-size fit, and the
//! example prints the fit it got from `Telemetry::batch_fit`.

use gpuspan_test_support as support;

use support::example::run_train;
use support::fake_nvml::FakeNvml;

#[test]
fn the_summary_says_the_headroom_and_the_fit() {
    let fake = FakeNvml::build();
    let root = tempfile::tempdir().unwrap();
    let out = run_train(
        &[
            "--epochs",
            "2",
            "--steps",
            "3",
            "--batch-size",
            "16,32",
            "--budget",
            "3GiB",
        ],
        &[
            ("GPUSPAN_RUN_DIR", root.path().to_str().unwrap()),
            ("GPUSPAN_RUN_ID", "budget"),
            ("GPUSPAN_NVML_LIB", fake.path().to_str().unwrap()),
            ("FAKE_NVML_USED_MIB", "2048"),
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stderr}");
    // The device holds 2 GiB throughout: 1 GiB under the 3 GiB budget, on the first span
    // that reached it.
    assert!(
        stderr.contains(
            "memory budget 3.0 GiB: highest peak 2.0 GiB (gpu 0, step 0), headroom 1.0 GiB \
             (33.3%)"
        ),
        "{stderr}"
    );
    // Memory does not change with the batch size here: all of it is fixed.
    assert!(
        stderr.contains(
            "batch-size fit: step peak = 2.0 GiB + 0 B per sample (2147483648 B + 0 B; error 0 \
             B, 6 steps, 2 batch sizes)"
        ),
        "{stderr}"
    );
    assert!(
        stdout.contains("batch-size fit: 2048.0 MiB + 0.0 MiB per sample"),
        "{stdout}"
    );
    assert!(!stderr.contains("budget_exceeded") && !stderr.contains("over the memory budget"));
}

#[test]
fn a_budget_without_a_unit_is_refused_with_the_variable_named() {
    let out = run_train(
        &["--epochs", "1", "--steps", "1"],
        &[("GPUSPAN_MEMORY_BUDGET", "20")],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("GPUSPAN_MEMORY_BUDGET=\"20\" is not valid: expected bytes with a unit"),
        "{stderr}"
    );
}

//! The candle example, run as a user runs it, with the fake NVML behind the real
//! nvml-wrapper: an epoch span per epoch and a step span per batch under it, each with the
//! fake device's memory, in the run directory by default.

use gpuspan_test_support as support;

use support::example::{clean_command, example_binary, int, read_spans};
use support::fake_nvml::{FakeNvml, MIB};

#[test]
fn every_epoch_and_batch_of_the_candle_loop_is_a_span_with_the_devices_memory() {
    let root = tempfile::tempdir().unwrap();
    let fake = FakeNvml::build();
    let example = example_binary("candle_loop");
    let envs = [("FAKE_NVML_USED_MIB", "2500"), ("GPUSPAN_RUN_ID", "candle")];
    let output = clean_command(&example, &["2"], &envs)
        .current_dir(root.path())
        .env("GPUSPAN_NVML_LIB", fake.path())
        .output()
        .unwrap_or_else(|e| panic!("{} runs: {e}", example.display()));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.contains("epoch 1: mean loss"), "{stdout}");

    let spans = read_spans(&root.path().join("gpuspan-runs").join("candle"));
    let named = |name: &str| -> Vec<_> { spans.iter().filter(|s| s.name == name).collect() };
    let (epochs, steps) = (named("epoch"), named("step"));
    let mut numbers: Vec<i64> = epochs.iter().map(|e| int(e, "ml.epoch").unwrap()).collect();
    numbers.sort();
    assert_eq!(numbers, vec![0, 1]);
    assert_eq!(steps.len(), 2 * 16, "256 samples in batches of 16, twice");
    for step in &steps {
        assert!(
            epochs.iter().any(|e| e.span_id == step.parent_span_id),
            "each step is a child of an epoch"
        );
        assert_eq!(int(step, "batch_size"), Some(16));
        assert_eq!(int(step, "gpu.memory.peak"), Some((2500 * MIB) as i64));
    }
}

//! As a user meets it: the `burn_train` example records its epochs and steps, and a program
//! that installed a subscriber first gets a clear error.

use super::*;

#[test]
fn a_subscriber_set_first_is_a_clear_error() {
    let root = tempfile::tempdir().unwrap();
    let output = train("taken", root.path(), &[]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains(
            "error: a global tracing subscriber is already set: call Gpuspan::init before \
             anything installs one"
        ),
        "{stdout}"
    );
}

#[test]
fn the_burn_train_example_records_its_epochs_and_steps_as_a_user_runs_it() {
    let root = tempfile::tempdir().unwrap();
    let fake = FakeNvml::build();
    let example = example_binary("burn_train");
    let artifacts = root.path().join("artifacts");
    let envs = [
        ("FAKE_NVML_USED_MIB", "3072"),
        ("GPUSPAN_RUN_ID", "example"),
    ];
    let output = clean_command(&example, &["2", artifacts.to_str().unwrap()], &envs)
        .current_dir(root.path())
        .env("GPUSPAN_NVML_LIB", fake.path())
        .output()
        .unwrap_or_else(|e| panic!("{} runs: {e}", example.display()));
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );

    let spans = read_spans(&root.path().join("gpuspan-runs").join("example"));
    assert_eq!(named(&spans, "epoch").len(), 2);
    let steps = named(&spans, "step");
    assert_eq!(steps.len(), 2 * 16, "256 samples in batches of 16, twice");
    assert!(steps
        .iter()
        .all(|s| int(s, "gpu.memory.peak") == Some((3072 * MIB) as i64)));
    assert!(root.path().join("artifacts/experiment.log").exists());
    let summary = String::from_utf8_lossy(&output.stderr);
    assert!(summary.contains("gpuspan: run example"), "{summary}");
}

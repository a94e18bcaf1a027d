//! Running the `train` example as a user would, as a separate process.

use std::path::PathBuf;
use std::process::{Command, Output};

/// The example binary `cargo test` built next to the test binaries.
pub fn train_binary() -> PathBuf {
    let deps = std::env::current_exe().unwrap();
    let profile_dir = deps.parent().unwrap().parent().unwrap();
    let binary = profile_dir.join("examples").join("train");
    assert!(
        binary.exists(),
        "{} is missing: run the tests with `cargo test`, which builds the examples",
        binary.display()
    );
    binary
}

/// Runs `train` with `args` and `envs`, with every gpuspan and OTel variable of the test
/// process cleared first.
pub fn run_train(args: &[&str], envs: &[(&str, &str)]) -> Output {
    let mut command = Command::new(train_binary());
    command.args(args);
    for (key, _) in std::env::vars() {
        if key.starts_with("OTEL_")
            || key.starts_with("GPUSPAN_")
            || key.starts_with("FAKE_NVML_")
            || key == "CUDA_VISIBLE_DEVICES"
        {
            command.env_remove(key);
        }
    }
    command.envs(envs.iter().copied());
    command.output().expect("train runs")
}

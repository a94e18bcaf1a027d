//! Running the `train` example as a user would, as a separate process.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::trace::v1::Span;

/// The example binary `cargo test` built next to the test binaries.
pub fn train_binary() -> PathBuf {
    example_binary("train")
}

/// An example binary of the package under test, which `cargo test` builds next to the
/// test binaries.
pub fn example_binary(name: &str) -> PathBuf {
    let deps = std::env::current_exe().unwrap();
    let profile_dir = deps.parent().unwrap().parent().unwrap();
    let binary = profile_dir.join("examples").join(name);
    assert!(
        binary.exists(),
        "{} is missing: run the tests with `cargo test` (for the command's tests, `cargo test \
         -p gpuspan -p gpuspan-cli`), which builds the SDK's examples",
        binary.display()
    );
    binary
}

/// Runs `train` with `args` and `envs`, with every gpuspan and OTel variable of the test
/// process cleared first.
pub fn run_train(args: &[&str], envs: &[(&str, &str)]) -> Output {
    train_command(args, envs).output().expect("train runs")
}

/// The command [`run_train`] runs, for a test that starts `train` and acts while it runs.
pub fn train_command(args: &[&str], envs: &[(&str, &str)]) -> Command {
    clean_command(train_binary(), args, envs)
}

/// `program` with `args`, as a user would start it: every gpuspan, OTel, fake-driver and
/// CUDA variable of the test process cleared (the fake's latency switch kept), then
/// `envs` set.
pub fn clean_command(
    program: impl AsRef<std::ffi::OsStr>,
    args: &[&str],
    envs: &[(&str, &str)],
) -> Command {
    let mut command = Command::new(program);
    command.args(args);
    for (key, _) in std::env::vars() {
        if key.starts_with("OTEL_")
            || (key.starts_with("GPUSPAN_") && key != crate::fake_nvml::LATENCY_VAR)
            || key.starts_with("FAKE_")
            || key == "CUDA_VISIBLE_DEVICES"
        {
            command.env_remove(key);
        }
    }
    command.envs(envs.iter().copied());
    command
}

/// Every span in a run directory's `traces.jsonl`, each line parsed as an OTLP/JSON export
/// request.
pub fn read_spans(dir: &Path) -> Vec<Span> {
    let text = std::fs::read_to_string(dir.join("traces.jsonl")).expect("traces.jsonl");
    let mut spans = Vec::new();
    for line in text.lines() {
        let request: ExportTraceServiceRequest =
            serde_json::from_str(line).expect("each line is an OTLP/JSON export request");
        for resource in request.resource_spans {
            for scope in resource.scope_spans {
                spans.extend(scope.spans);
            }
        }
    }
    spans
}

/// An integer attribute of a span read from a run directory.
pub fn int(span: &Span, key: &str) -> Option<i64> {
    span.attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| match kv.value.as_ref()?.value.as_ref()? {
            Value::IntValue(v) => Some(*v),
            _ => None,
        })
}

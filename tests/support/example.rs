//! Running the `train` example as a user would, as a separate process.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::trace::v1::Span;

use crate::fake_nvml::FakeNvml;

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

/// A run of `train` as the end-to-end tests start it: a number of epochs and steps, its run
/// directory in the test's, reading no GPU unless it is given the fake NVML library.
pub struct Train {
    args: Vec<String>,
    envs: Vec<(String, String)>,
}

impl Train {
    /// `epochs` epochs of `steps` steps, its run directory under `dir`.
    pub fn new(epochs: usize, steps: usize, dir: &Path) -> Train {
        let args = [
            "--epochs",
            &epochs.to_string(),
            "--steps",
            &steps.to_string(),
        ]
        .map(str::to_owned)
        .to_vec();
        Train {
            args,
            envs: Vec::new(),
        }
        .env("GPUSPAN_RUN_DIR", dir.to_str().expect("a UTF-8 path"))
        .env("GPUSPAN_NVML_LIB", "/nonexistent/libnvidia-ml.so.1")
    }

    /// More arguments.
    pub fn args(mut self, args: &[&str]) -> Train {
        self.args.extend(args.iter().map(|a| a.to_string()));
        self
    }

    /// A variable set (over one set before).
    pub fn env(mut self, key: &str, value: &str) -> Train {
        self.envs.retain(|(k, _)| k != key);
        self.envs.push((key.to_owned(), value.to_owned()));
        self
    }

    /// Exports over OTLP to `endpoint` (`OTEL_EXPORTER_OTLP_ENDPOINT`) with `protocol`.
    pub fn otlp(self, endpoint: &str, protocol: &str) -> Train {
        self.env("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint)
            .env("OTEL_EXPORTER_OTLP_PROTOCOL", protocol)
    }

    /// Names the service, and the run `run_id`.
    pub fn named(self, service: &str, run_id: &str) -> Train {
        self.env("OTEL_SERVICE_NAME", service)
            .env("GPUSPAN_RUN_ID", run_id)
    }

    /// Reads `fake`, its first device using `used_mib` MiB.
    pub fn on_fake(self, fake: &FakeNvml, used_mib: u64) -> Train {
        self.env(
            "GPUSPAN_NVML_LIB",
            fake.path().to_str().expect("a UTF-8 path"),
        )
        .env("FAKE_NVML_USED_MIB", &used_mib.to_string())
    }

    /// The command, to start and act on while it runs.
    pub fn command(&self) -> Command {
        let args: Vec<&str> = self.args.iter().map(String::as_str).collect();
        let envs: Vec<(&str, &str)> = self
            .envs
            .iter()
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        train_command(&args, &envs)
    }

    /// Runs it to its end; asserts it succeeded and returns what it wrote to stderr.
    pub fn run(&self) -> String {
        let out = self.command().output().expect("train runs");
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(out.status.success(), "train failed:\n{stderr}");
        stderr
    }
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

//! The MLflow overlay runs for real: the collector built from the official Go modules, with
//! collector/otelcol.yaml and collector/otelcol.mlflow.yaml, receives the `train` example's
//! spans and forwards them to an MLflow tracking server (its `/v1/traces`, the experiment from
//! MLFLOW_EXPERIMENT_ID), which gives back one trace per epoch with the steps under their
//! epoch and the memory attributes as integers equal to the fake GPU's figure.

use gpuspan_test_support as support;

use std::time::Duration;

use support::example::run_train;
use support::fake_nvml::{FakeNvml, MIB};
use support::go_stack::Collector;
use support::mlflow::{epoch_and_steps, int_attribute, Mlflow};
use support::receiver::Receiver;

const USED_MIB: u64 = 2750;
const EPOCHS: usize = 2;
const STEPS: usize = 3;
const RUN_ID: &str = "otelcol-mlflow-run";

#[test]
fn one_mlflow_trace_per_epoch_with_its_steps_and_integer_memory() {
    let dir = tempfile::tempdir().unwrap();
    let mut mlflow = Mlflow::start(dir.path());
    let experiment = mlflow.create_experiment("gpuspan-via-otelcol");
    // The base configuration's trace backends, Jaeger and Tempo, stand in as OTLP receivers.
    let (jaeger, tempo) = (Receiver::start_grpc(), Receiver::start_grpc());
    let bare = |r: &Receiver| r.endpoint().trim_start_matches("http://").to_string();
    let collector = Collector::start(
        dir.path(),
        &["otelcol.yaml", "otelcol.mlflow.yaml"],
        &bare(&jaeger),
        &bare(&tempo),
        &[
            ("MLFLOW_TRACES_ENDPOINT", &mlflow.traces_url()),
            ("MLFLOW_EXPERIMENT_ID", &experiment),
        ],
    );

    let fake = FakeNvml::build();
    let out = run_train(
        &[
            "--epochs",
            &EPOCHS.to_string(),
            "--steps",
            &STEPS.to_string(),
        ],
        &[
            (
                "OTEL_EXPORTER_OTLP_ENDPOINT",
                &collector.otlp_endpoint("grpc"),
            ),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
            ("OTEL_METRICS_EXPORTER", "none"),
            ("OTEL_SERVICE_NAME", "train-via-otelcol-to-mlflow"),
            ("GPUSPAN_RUN_ID", RUN_ID),
            ("GPUSPAN_RUN_DIR", dir.path().to_str().unwrap()),
            ("GPUSPAN_NVML_LIB", fake.path().to_str().unwrap()),
            ("FAKE_NVML_USED_MIB", &USED_MIB.to_string()),
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "train failed:\n{stderr}");

    let infos = mlflow.wait_for_traces(&experiment, EPOCHS, Duration::from_secs(60));
    assert_eq!(
        infos.len(),
        EPOCHS,
        "one MLflow trace per epoch: {infos:?}\ncollector:\n{}",
        collector.log_tail()
    );
    let used = (USED_MIB * MIB) as i64;
    let mut epoch_indexes = Vec::new();
    for info in &infos {
        assert_eq!(info["state"], "OK", "{info}");
        assert_eq!(
            info["tags"]["ml.run.id"], RUN_ID,
            "the run id is a tag: {info}"
        );
        let spans = mlflow.spans(info["trace_id"].as_str().expect("trace_id"));
        let (epoch, steps) = epoch_and_steps(&spans, STEPS);
        epoch_indexes.push(int_attribute(epoch, "ml.epoch").unwrap());
        for span in std::iter::once(&epoch).chain(&steps) {
            for key in ["gpu.memory.start", "gpu.memory.peak", "gpu.memory.end"] {
                assert_eq!(int_attribute(span, key), Ok(used), "{key} of {span}");
            }
        }
    }
    epoch_indexes.sort();
    assert_eq!(epoch_indexes, [0, 1]);
    // The base pipeline still sent the same spans to its own backends.
    let expected = EPOCHS * (STEPS + 1);
    let at_jaeger = jaeger.wait_for_spans(|s| s.len() >= expected, Duration::from_secs(30));
    assert_eq!(at_jaeger.len(), expected, "spans at the Jaeger endpoint");
}

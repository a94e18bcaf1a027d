//! An MLflow tracking server receives the `train` example's spans over OTLP/HTTP (its
//! `/v1/traces` endpoint with the `x-mlflow-experiment-id` header, set through the standard
//! per-signal OTel variables) and gives them back through its REST API: one trace per epoch,
//! the steps under their epoch, the memory attributes still integers, the run id as a tag.

use gpuspan_test_support as support;

use std::collections::BTreeMap;
use std::time::Duration;

use support::example::run_train;
use support::fake_nvml::{FakeNvml, MIB};
use support::mlflow::{epoch_and_steps, int_attribute, Mlflow};

const USED_MIB: u64 = 2500;
const EPOCHS: usize = 2;
const STEPS: usize = 3;
const RUN_ID: &str = "mlflow-run";

#[test]
fn spans_sent_over_otlp_http_come_back_from_the_rest_api() {
    let dir = tempfile::tempdir().unwrap();
    let mut mlflow = Mlflow::start(dir.path());
    let experiment = mlflow.create_experiment("gpuspan");

    let fake = FakeNvml::build();
    let out = run_train(
        &[
            "--epochs",
            &EPOCHS.to_string(),
            "--steps",
            &STEPS.to_string(),
            "--batch-size",
            "8",
        ],
        &[
            ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", &mlflow.traces_url()),
            ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf"),
            (
                "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
                &format!("x-mlflow-experiment-id={experiment}"),
            ),
            ("OTEL_METRICS_EXPORTER", "none"),
            ("OTEL_SERVICE_NAME", "train-to-mlflow"),
            ("GPUSPAN_RUN_ID", RUN_ID),
            ("GPUSPAN_RUN_DIR", dir.path().to_str().unwrap()),
            ("GPUSPAN_NVML_LIB", fake.path().to_str().unwrap()),
            ("FAKE_NVML_USED_MIB", &USED_MIB.to_string()),
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "train failed:\n{stderr}");
    assert!(
        !stderr.contains("could not export"),
        "train could not export to MLflow:\n{stderr}\nMLflow:\n{}",
        mlflow.server.output_tail()
    );

    let infos = mlflow.wait_for_traces(&experiment, EPOCHS, Duration::from_secs(30));
    assert_eq!(infos.len(), EPOCHS, "one MLflow trace per epoch: {infos:?}");

    let used = (USED_MIB * MIB) as i64;
    let mut epoch_indexes = Vec::new();
    for info in &infos {
        assert_eq!(info["state"], "OK", "{info}");
        assert_eq!(
            info["tags"]["ml.run.id"], RUN_ID,
            "the run id is a tag: {info}"
        );
        assert_eq!(info["tags"]["service.name"], "train-to-mlflow", "{info}");
        let spans = mlflow.spans(info["trace_id"].as_str().expect("trace_id"));
        let (epoch, steps) = epoch_and_steps(&spans, STEPS);
        assert!(
            epoch.get("parent_span_id").is_none_or(|p| p == ""),
            "the epoch is the trace's root: {epoch}"
        );
        epoch_indexes.push(int_attribute(epoch, "ml.epoch").unwrap());

        for span in std::iter::once(&epoch).chain(&steps) {
            let mut memory = BTreeMap::new();
            for key in [
                "gpu.memory.start",
                "gpu.memory.peak",
                "gpu.memory.end",
                "process.memory.peak",
            ] {
                memory.insert(key, int_attribute(span, key).unwrap());
            }
            assert_eq!(memory["gpu.memory.peak"], used, "{memory:?}");
            assert_eq!(memory["gpu.memory.start"], used, "{memory:?}");
            assert_eq!(memory["gpu.memory.end"], used, "{memory:?}");
            assert!(memory["process.memory.peak"] > 0, "{memory:?}");
        }
    }
    epoch_indexes.sort();
    assert_eq!(epoch_indexes, [0, 1]);
    drop(mlflow);
}

//! An MLflow tracking server receives the `train` example's spans over OTLP/HTTP (its
//! `/v1/traces` endpoint with the `x-mlflow-experiment-id` header, set through the standard
//! per-signal OTel variables) and gives them back through its REST API: one trace per epoch,
//! the steps under their epoch, the memory attributes still integers, the run id as a tag.

use gpuspan_test_support as support;

use std::time::Duration;

use support::example::Train;
use support::fake_nvml::{FakeNvml, MIB};
use support::mlflow::{assert_device_memory, int_attribute, Mlflow};

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
    let stderr = Train::new(EPOCHS, STEPS, dir.path())
        .args(&["--batch-size", "8"])
        .env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", &mlflow.traces_url())
        .env("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf")
        .env(
            "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
            &format!("x-mlflow-experiment-id={experiment}"),
        )
        .env("OTEL_METRICS_EXPORTER", "none")
        .named("train-to-mlflow", RUN_ID)
        .on_fake(&fake, USED_MIB)
        .run();
    assert!(
        !stderr.contains("could not export"),
        "train could not export to MLflow:\n{stderr}\nMLflow:\n{}",
        mlflow.server.output_tail()
    );

    let infos = mlflow.wait_for_traces(&experiment, EPOCHS, Duration::from_secs(30));
    assert_eq!(infos.len(), EPOCHS, "one MLflow trace per epoch: {infos:?}");
    for epoch in mlflow.epochs(&infos, RUN_ID, STEPS) {
        let info = &epoch.info;
        assert_eq!(info["tags"]["service.name"], "train-to-mlflow", "{info}");
        assert!(
            epoch.epoch.get("parent_span_id").is_none_or(|p| p == ""),
            "the epoch is the trace's root: {}",
            epoch.epoch
        );
        for span in epoch.spans() {
            assert_device_memory(span, (USED_MIB * MIB) as i64);
            let process_peak = int_attribute(span, "process.memory.peak");
            assert!(
                process_peak.as_ref().is_ok_and(|&v| v > 0),
                "{process_peak:?}"
            );
        }
    }
    drop(mlflow);
}

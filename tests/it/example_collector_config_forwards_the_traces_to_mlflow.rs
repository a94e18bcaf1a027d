//! The MLflow overlay runs for real: the collector built from the official Go modules, with
//! collector/otelcol.yaml and collector/otelcol.mlflow.yaml, receives the `train` example's
//! spans and forwards them to an MLflow tracking server (its `/v1/traces`, the experiment from
//! MLFLOW_EXPERIMENT_ID), which gives back one trace per epoch with the steps under their
//! epoch and the memory attributes as integers equal to the fake GPU's figure.

use gpuspan_test_support as support;

use std::time::Duration;

use support::example::Train;
use support::fake_nvml::{FakeNvml, MIB};
use support::go_stack::Collector;
use support::mlflow::{assert_device_memory, Mlflow};
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
    let collector = Collector::start_to_receivers(
        dir.path(),
        &["otelcol.yaml", "otelcol.mlflow.yaml"],
        &jaeger,
        &tempo,
        &[
            ("MLFLOW_TRACES_ENDPOINT", &mlflow.traces_url()),
            ("MLFLOW_EXPERIMENT_ID", &experiment),
        ],
    );

    let fake = FakeNvml::build();
    Train::new(EPOCHS, STEPS, dir.path())
        .otlp(&collector.otlp_endpoint("grpc"), "grpc")
        .env("OTEL_METRICS_EXPORTER", "none")
        .named("train-via-otelcol-to-mlflow", RUN_ID)
        .on_fake(&fake, USED_MIB)
        .run();

    let infos = mlflow.wait_for_traces(&experiment, EPOCHS, Duration::from_secs(60));
    assert_eq!(
        infos.len(),
        EPOCHS,
        "one MLflow trace per epoch: {infos:?}\ncollector:\n{}",
        collector.log_tail()
    );
    for epoch in mlflow.epochs(&infos, RUN_ID, STEPS) {
        epoch
            .spans()
            .for_each(|span| assert_device_memory(span, (USED_MIB * MIB) as i64));
    }
    // The base pipeline still sent the same spans to its own backends.
    let expected = EPOCHS * (STEPS + 1);
    let at_jaeger = jaeger.wait_for_spans(|s| s.len() >= expected, Duration::from_secs(30));
    assert_eq!(at_jaeger.len(), expected, "spans at the Jaeger endpoint");
}

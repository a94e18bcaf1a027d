//! What a user finds in Jaeger under the training's service is the training's spans, not the
//! internals of gpuspan's own exporter: the `train` example ships over OTLP/gRPC to the
//! collector built from the official Go modules (collector/otelcol.yaml), and every span that
//! Jaeger holds for the service is an epoch or a step. (The HTTP/2 client under the gRPC
//! exporter opens `tracing` spans of its own on the export thread, such as
//! `FramedRead::decode_frame`; they must not be recorded as the program's spans.)

use gpuspan_test_support as support;

use std::collections::BTreeMap;
use std::time::Duration;

use support::example::run_train;
use support::go_stack::{Collector, Jaeger};
use support::receiver::Receiver;

const EPOCHS: usize = 3;
const STEPS: usize = 20;
const SERVICE: &str = "train-only-its-own-spans";

#[test]
fn every_span_of_the_service_is_an_epoch_or_a_step() {
    let dir = tempfile::tempdir().unwrap();
    let mut jaeger = Jaeger::start(dir.path());
    let tempo = Receiver::start_grpc();
    let tempo_endpoint = tempo.endpoint().trim_start_matches("http://").to_string();
    let collector = Collector::start(
        dir.path(),
        &["otelcol.yaml"],
        &jaeger.otlp_endpoint(),
        &tempo_endpoint,
        &[],
    );
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
            ("OTEL_SERVICE_NAME", SERVICE),
            ("GPUSPAN_RUN_DIR", dir.path().to_str().unwrap()),
            ("GPUSPAN_NVML_LIB", "/nonexistent/libnvidia-ml.so.1"),
        ],
    );
    assert!(
        out.status.success(),
        "train failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );

    let expected = EPOCHS + EPOCHS * STEPS;
    let spans = jaeger.wait_for_spans(SERVICE, Duration::from_secs(30), |spans| {
        let training = spans
            .iter()
            .filter(|s| s.operation == "epoch" || s.operation == "step");
        training.count() >= expected
    });
    let mut by_operation = BTreeMap::<&str, usize>::new();
    for span in &spans {
        *by_operation.entry(span.operation.as_str()).or_default() += 1;
    }
    assert_eq!(
        by_operation,
        BTreeMap::from([("epoch", EPOCHS), ("step", EPOCHS * STEPS)]),
        "the spans Jaeger holds for {SERVICE}, by operation"
    );
}

//! What a user finds in Jaeger under the training's service is the training's spans, not the
//! internals of gpuspan's own exporter: the `train` example ships over OTLP/gRPC to the
//! collector built from the official Go modules (collector/otelcol.yaml), and every span that
//! Jaeger holds for the service is an epoch or a step. (The HTTP/2 client under the gRPC
//! exporter opens `tracing` spans of its own on the export thread, such as
//! `FramedRead::decode_frame`; they must not be recorded as the program's spans.)

use gpuspan_test_support as support;

use std::collections::BTreeMap;
use std::time::Duration;

use support::example::Train;
use support::go_stack::BaseStack;

const EPOCHS: usize = 3;
const STEPS: usize = 20;
const SERVICE: &str = "train-only-its-own-spans";

#[test]
fn every_span_of_the_service_is_an_epoch_or_a_step() {
    let dir = tempfile::tempdir().unwrap();
    let mut stack = BaseStack::start(dir.path());
    Train::new(EPOCHS, STEPS, dir.path())
        .otlp(&stack.collector.otlp_endpoint("grpc"), "grpc")
        .env("OTEL_SERVICE_NAME", SERVICE)
        .run();

    let expected = EPOCHS + EPOCHS * STEPS;
    let spans = stack
        .jaeger
        .wait_for_spans(SERVICE, Duration::from_secs(30), |spans| {
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

//! The W&B Weave overlay runs for real against a local OTLP/HTTP receiver standing in for
//! Weave (WEAVE_OTLP_TRACES_ENDPOINT): the collector built from the official Go modules, with
//! collector/otelcol.yaml and collector/otelcol.weave.yaml, forwards every span of the `train`
//! example there with the API key and project headers from the environment and the
//! wandb.entity / wandb.project resource attributes that route them to the project.

use gpuspan_test_support as support;

use std::time::Duration;

use support::example::Train;
use support::fake_nvml::{FakeNvml, MIB};
use support::go_stack::Collector;
use support::receiver::{Receiver, Signal};

const USED_MIB: u64 = 1500;
const EPOCHS: usize = 2;
const STEPS: usize = 4;

#[test]
fn every_span_arrives_with_the_key_the_project_and_integer_memory() {
    let dir = tempfile::tempdir().unwrap();
    let weave = Receiver::start_http();
    let (jaeger, tempo) = (Receiver::start_grpc(), Receiver::start_grpc());
    let collector = Collector::start_to_receivers(
        dir.path(),
        &["otelcol.yaml", "otelcol.weave.yaml"],
        &jaeger,
        &tempo,
        &[
            ("WEAVE_OTLP_TRACES_ENDPOINT", &weave.traces_url()),
            ("WANDB_API_KEY", "test-key-123"),
            ("WANDB_ENTITY", "gpu-team"),
            ("WANDB_PROJECT", "resnet"),
        ],
    );

    let fake = FakeNvml::build();
    Train::new(EPOCHS, STEPS, dir.path())
        .otlp(&collector.otlp_endpoint("http/protobuf"), "http/protobuf")
        .env("OTEL_METRICS_EXPORTER", "none")
        .env("OTEL_SERVICE_NAME", "train-via-otelcol-to-weave")
        .on_fake(&fake, USED_MIB)
        .run();

    let expected = EPOCHS * (STEPS + 1);
    let spans = weave.wait_for_spans(|s| s.len() >= expected, Duration::from_secs(30));
    assert_eq!(
        spans.len(),
        expected,
        "spans at the Weave endpoint; collector:\n{}",
        collector.log_tail()
    );
    for span in &spans {
        assert_eq!(span.resource_str_attr("wandb.entity"), Some("gpu-team"));
        assert_eq!(span.resource_str_attr("wandb.project"), Some("resnet"));
        assert_eq!(
            span.resource_str_attr("service.name"),
            Some("train-via-otelcol-to-weave")
        );
        assert_eq!(
            span.int_attr("gpu.memory.peak"),
            Some((USED_MIB * MIB) as i64),
            "{span:?}"
        );
    }
    let headers = weave.headers();
    assert!(!headers.is_empty());
    for request in headers.iter().filter(|h| h.signal == Signal::Traces) {
        assert_eq!(request.get("wandb-api-key"), Some("test-key-123"));
        assert_eq!(request.get("project_id"), Some("gpu-team/resnet"));
    }
    // The base pipeline did not pick up the Weave routing attributes.
    let at_jaeger = jaeger.wait_for_spans(|s| s.len() >= expected, Duration::from_secs(30));
    assert_eq!(at_jaeger.len(), expected, "spans at the Jaeger endpoint");
    assert!(at_jaeger
        .iter()
        .all(|s| s.resource_str_attr("wandb.entity").is_none()));
}

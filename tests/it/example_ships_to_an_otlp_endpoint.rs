//! The `train` example, a program that uses exactly the snippet of the README, ships its
//! epoch and step spans over OTLP when an endpoint is set, over gRPC and over HTTP.

use gpuspan_test_support as support;

use support::example::run_train;
use support::fake_nvml::FakeNvml;
use support::receiver::Receiver;

fn ship(receiver: Receiver, protocol: &str) {
    let fake = FakeNvml::build();
    let out = run_train(
        &["--epochs", "2", "--steps", "5", "--batch-size", "16"],
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &receiver.endpoint()),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", protocol),
            ("OTEL_SERVICE_NAME", "train-example"),
            ("GPUSPAN_NVML_LIB", fake.path().to_str().unwrap()),
            ("FAKE_NVML_USED_MIB", "3000"),
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let epochs = receiver.spans_named("epoch");
    let steps = receiver.spans_named("step");
    assert_eq!(epochs.len(), 2);
    assert_eq!(steps.len(), 10);
    for step in &steps {
        assert!(epochs.iter().any(|e| step.is_child_of(e)));
        assert_eq!(step.int_attr("gpu.memory.peak"), Some(3000 << 20));
        assert!(step.int_attr("process.memory.peak").unwrap() > 0);
        assert_eq!(step.int_attr("batch_size"), Some(16));
        assert_eq!(
            step.resource_str_attr("service.name"),
            Some("train-example")
        );
    }
    assert!(!receiver.points_named("hw.gpu.memory.usage").is_empty());
}

#[test]
fn over_grpc() {
    ship(Receiver::start_grpc(), "grpc");
}

#[test]
fn over_http() {
    ship(Receiver::start_http(), "http/protobuf");
}

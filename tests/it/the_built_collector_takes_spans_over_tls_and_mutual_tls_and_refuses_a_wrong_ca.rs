//! The OpenTelemetry Collector built from the official Go modules, its OTLP receivers
//! serving TLS with a certificate of a CA made in the test (collector/otelcol.yaml with an
//! overlay that adds `tls` to both protocols): a program's spans reach the collector's trace
//! backend over gRPC and HTTP with that CA, and with a client certificate where the receivers
//! require one (mutual TLS). With a wrong CA every span is refused and counted as lost, and
//! the error names the handshake, the endpoint and the CA.

use gpuspan_test_support as support;

use std::path::Path;
use std::time::Duration;

use gpuspan::{Builder, Protocol};
use support::go_stack::Collector;
use support::receiver::Receiver;
use support::setup;
use support::tls::TestPki;

const STEPS: u64 = 3;

/// The collector with TLS on both receivers (mutual: client certificates of the same CA
/// required), exporting traces to `backend` (as its Jaeger) and `tempo` in plain text.
fn tls_collector(
    dir: &Path,
    pki: &TestPki,
    mutual: bool,
    backend: &Receiver,
    tempo: &Receiver,
) -> Collector {
    let (cert, key) = pki.server_files();
    let client_ca = if mutual {
        format!("\n          client_ca_file: {}", pki.ca_file().display())
    } else {
        String::new()
    };
    let tls = format!(
        "\n        tls:\n          cert_file: {}\n          key_file: {}{client_ca}",
        cert.display(),
        key.display()
    );
    let overlay = dir.join("tls.yaml");
    std::fs::write(
        &overlay,
        format!("receivers:\n  otlp:\n    protocols:\n      grpc:{tls}\n      http:{tls}\n"),
    )
    .unwrap();
    let plain = |receiver: &Receiver| receiver.endpoint().trim_start_matches("http://").to_owned();
    Collector::start(
        dir,
        &["otelcol.yaml", overlay.to_str().unwrap()],
        &plain(backend),
        &plain(tempo),
        &[],
    )
}

/// The collector's `https://` endpoint for `protocol`.
fn https(collector: &Collector, protocol: Protocol) -> String {
    let name = match protocol {
        Protocol::Grpc => "grpc",
        _ => "http/protobuf",
    };
    collector
        .otlp_endpoint(name)
        .replacen("http://", "https://", 1)
}

/// Trains a few steps sending to the collector; the spans delivered and lost, and how
/// shutdown went.
fn train(
    collector: &Collector,
    protocol: Protocol,
    configure: impl FnOnce(Builder) -> Builder,
) -> ((u64, u64), Result<(), gpuspan::ShutdownError>) {
    let builder = gpuspan::Telemetry::builder()
        .endpoint(https(collector, protocol))
        .protocol(protocol)
        .service_name(format!("tls-{protocol:?}"))
        .summary(false)
        .timeout(Duration::from_secs(3))
        .nvml_lib("/nonexistent/libnvidia-ml.so.1")
        .sysfs_root("/nonexistent/sys");
    setup::train_and_shut_down(configure(builder), STEPS)
}

/// Asserts that a run over `protocol` (`trained`, as [`train`] returns it) delivered every
/// span, and that they reached the collector's backend; `how` is the transport, for the
/// message.
fn assert_delivered(
    collector: &Collector,
    backend: &Receiver,
    protocol: Protocol,
    how: &str,
    trained: ((u64, u64), Result<(), gpuspan::ShutdownError>),
) {
    let (tally, result) = trained;
    result.unwrap_or_else(|e| {
        panic!(
            "{protocol:?} over {how}: {e}\ncollector log:\n{}",
            collector.log_tail()
        )
    });
    assert_eq!(tally, (STEPS + 1, 0), "{protocol:?}");
    assert_eq!(steps_of(backend, protocol), STEPS as usize, "{protocol:?}");
}

fn steps_of(backend: &Receiver, protocol: Protocol) -> usize {
    let service = format!("tls-{protocol:?}");
    let spans = backend.wait_for_spans(
        |spans| {
            spans
                .iter()
                .filter(|s| {
                    s.name == "step" && s.resource_str_attr("service.name") == Some(&service)
                })
                .count()
                >= STEPS as usize
        },
        Duration::from_secs(20),
    );
    spans
        .iter()
        .filter(|s| s.name == "step" && s.resource_str_attr("service.name") == Some(&service))
        .count()
}

#[test]
fn tls_receivers_take_spans_with_the_ca_and_refuse_a_wrong_one() {
    let dir = tempfile::tempdir().unwrap();
    let pki = TestPki::new("collector");
    let (backend, tempo) = (Receiver::start_grpc(), Receiver::start_grpc());
    let collector = tls_collector(dir.path(), &pki, false, &backend, &tempo);
    for protocol in [Protocol::Grpc, Protocol::HttpProtobuf] {
        let trained = train(&collector, protocol, |b| b.certificate(pki.ca_file()));
        assert_delivered(&collector, &backend, protocol, "TLS", trained);
    }

    let other = TestPki::new("other");
    for protocol in [Protocol::Grpc, Protocol::HttpProtobuf] {
        let (tally, result) = train(&collector, protocol, |b| b.certificate(other.ca_file()));
        let error = result.expect_err("a wrong CA delivers nothing").to_string();
        assert_eq!(tally, (0, STEPS + 1), "{protocol:?}: {error}");
        let ca = other.ca_file().display().to_string();
        assert!(
            error.contains("TLS handshake")
                && error.contains(&https(&collector, protocol))
                && error.contains(&ca),
            "{protocol:?}: the error names the handshake, the endpoint and the CA: {error}"
        );
    }
}

#[test]
fn mutual_tls_receivers_take_spans_with_a_client_certificate_and_refuse_one_without() {
    let dir = tempfile::tempdir().unwrap();
    let pki = TestPki::new("collector");
    let (backend, tempo) = (Receiver::start_grpc(), Receiver::start_grpc());
    let collector = tls_collector(dir.path(), &pki, true, &backend, &tempo);
    let (cert, key) = pki.client_files();
    for protocol in [Protocol::Grpc, Protocol::HttpProtobuf] {
        let trained = train(&collector, protocol, |b| {
            b.certificate(pki.ca_file())
                .client_certificate(&cert)
                .client_key(&key)
        });
        assert_delivered(&collector, &backend, protocol, "mutual TLS", trained);
    }
    for protocol in [Protocol::Grpc, Protocol::HttpProtobuf] {
        let (tally, result) = train(&collector, protocol, |b| b.certificate(pki.ca_file()));
        let error = result
            .expect_err("no client certificate, nothing delivered")
            .to_string();
        assert_eq!(tally, (0, STEPS + 1), "{protocol:?}: {error}");
        assert!(
            error.contains(&https(&collector, protocol)),
            "{protocol:?}: the error names the endpoint: {error}"
        );
    }
}

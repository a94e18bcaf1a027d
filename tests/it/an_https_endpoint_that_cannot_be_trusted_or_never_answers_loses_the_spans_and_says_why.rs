//! `https://` endpoints that go wrong in ways a cluster meets: a machine with no system
//! certificate store (a slim container image), where the bundled web roots must still be
//! what the server is checked against, over gRPC as over HTTP; and a server that accepts
//! the connection but never answers the handshake, which must cost the training nothing and
//! shutdown no more than its timeout, the spans counted as lost with the endpoint named.

use gpuspan_test_support as support;

use std::net::TcpListener;
use std::time::{Duration, Instant};

use support::example::run_train;
use support::receiver::{Protocol, Receiver};
use support::setup;
use support::tls::TestPki;

/// `train` against a TLS receiver whose CA is nowhere the program looks, on a machine with
/// no system certificates: it trains, and its loss is told as a handshake checked against
/// the system's (none) and the bundled web roots.
fn no_system_roots(protocol: Protocol, protocol_name: &str) {
    let pki = TestPki::new("private");
    let receiver = Receiver::start_tls(protocol, pki.server(false));
    let empty = tempfile::tempdir().unwrap();
    let no_file = empty.path().join("no-bundle.pem");
    let out = run_train(
        &["--epochs", "1", "--steps", "2"],
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &receiver.endpoint()),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", protocol_name),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "2000"),
            ("GPUSPAN_NVML_LIB", "/nonexistent/libnvidia-ml.so.1"),
            ("GPUSPAN_SUMMARY", "false"),
            // Where rustls-native-certs looks first: nothing there.
            ("SSL_CERT_FILE", no_file.to_str().unwrap()),
            ("SSL_CERT_DIR", empty.path().to_str().unwrap()),
        ],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stdout.contains("epoch 0:"),
        "the program trains with no system certificates:\n{stdout}\n{stderr}"
    );
    assert!(
        stderr.contains("TLS handshake")
            && stderr.contains(&receiver.endpoint())
            && stderr.contains("bundled web roots"),
        "the loss names the handshake, the endpoint and the roots it was checked against:\n{stderr}"
    );
    assert!(receiver.spans_named("step").is_empty());
}

#[test]
fn grpc_with_no_system_certificates_checks_the_server_against_the_bundled_web_roots() {
    no_system_roots(Protocol::Grpc, "grpc");
}

#[test]
fn http_with_no_system_certificates_checks_the_server_against_the_bundled_web_roots() {
    no_system_roots(Protocol::Http, "http/protobuf");
}

/// A server that accepts TCP connections and then says nothing: every TLS handshake with
/// it stalls.
struct SilentServer {
    listener: TcpListener,
    held: std::sync::Arc<std::sync::Mutex<Vec<std::net::TcpStream>>>,
}

impl SilentServer {
    fn start() -> SilentServer {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let held = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let accepting = listener.try_clone().unwrap();
        let keep = std::sync::Arc::clone(&held);
        std::thread::spawn(move || {
            for stream in accepting.incoming().flatten() {
                keep.lock().unwrap().push(stream);
            }
        });
        SilentServer { listener, held }
    }

    fn endpoint(&self) -> String {
        format!("https://{}", self.listener.local_addr().unwrap())
    }

    fn connections(&self) -> usize {
        self.held.lock().unwrap().len()
    }
}

fn stalled_handshake(protocol: gpuspan::Protocol) {
    let pki = TestPki::new("private");
    let server = SilentServer::start();
    let timeout = Duration::from_secs(1);
    let builder = gpuspan::Telemetry::builder()
        .endpoint(server.endpoint())
        .protocol(protocol)
        .certificate(pki.ca_file())
        .timeout(timeout)
        .service_name("gpuspan-test")
        .summary(false)
        .nvml_lib("/nonexistent/libnvidia-ml.so.1")
        .sysfs_root("/nonexistent/sys");
    let (telemetry, trained) = setup::run(builder, |_| {
        let started = Instant::now();
        let _e = gpuspan::epoch_span!(0u32);
        for step in 0..3u64 {
            let _s = gpuspan::step_span!(step);
        }
        started.elapsed()
    });
    assert!(
        trained < timeout,
        "the steps waited on the stalled handshake: {trained:?}"
    );
    let tally = telemetry.export_tally();
    let started = Instant::now();
    let error = telemetry
        .shutdown()
        .expect_err("nothing can be delivered")
        .to_string();
    let took = started.elapsed();
    assert!(server.connections() > 0, "the exporter never connected");
    // Shutdown's flush may wait out one export timeout per signal, and the exporter's own
    // shutdown as much again: not a stalled handshake's whole life.
    assert!(
        took < 6 * timeout + Duration::from_secs(4),
        "shutdown took {took:?} with an export timeout of {timeout:?}"
    );
    let spans = tally.spans();
    assert_eq!((spans.delivered, spans.lost), (0, 4), "{error}");
    assert!(error.contains(&server.endpoint()), "{error}");
}

#[test]
fn a_grpc_handshake_that_never_finishes_holds_neither_the_steps_nor_shutdown() {
    stalled_handshake(gpuspan::Protocol::Grpc);
}

#[test]
fn an_http_handshake_that_never_finishes_holds_neither_the_steps_nor_shutdown() {
    stalled_handshake(gpuspan::Protocol::HttpProtobuf);
}

/// Only traces exported (`OTEL_METRICS_EXPORTER=none`, as many programs run), to a server
/// checked against a wrong CA: the spans are retried until shutdown, and the loss still
/// says it was the handshake, with the endpoint and the CA, not only that time ran out.
fn wrong_ca_traces_only(protocol: Protocol) {
    let pki = TestPki::new("server's");
    let other = TestPki::new("other");
    let receiver = Receiver::start_tls(protocol, pki.server(false));
    let builder = setup::to_receiver(&receiver)
        .metrics_exporter(gpuspan::settings::Exporter::None)
        .certificate(other.ca_file())
        .timeout(Duration::from_millis(1500));
    let (telemetry, ()) = setup::run(builder, |_| {
        let _s = gpuspan::step_span!(0u64);
    });
    let tally = telemetry.export_tally();
    let error = telemetry
        .shutdown()
        .expect_err("nothing is delivered")
        .to_string();
    assert_eq!(tally.spans().lost, 1, "{error}");
    let ca = other.ca_file().display().to_string();
    assert!(
        error.contains("TLS handshake")
            && error.contains(&receiver.endpoint())
            && error.contains(&ca),
        "names the handshake, the endpoint and the CA: {error}"
    );
}

#[test]
fn grpc_traces_only_to_a_wrong_ca_name_the_handshake_and_the_ca() {
    wrong_ca_traces_only(Protocol::Grpc);
}

#[test]
fn http_traces_only_to_a_wrong_ca_name_the_handshake_and_the_ca() {
    wrong_ca_traces_only(Protocol::Http);
}

/// A client key that is not the client certificate's stops the build, naming the setter
/// and the file, before any export is tried.
#[test]
fn a_client_key_of_another_certificate_is_refused_at_init_naming_it() {
    let pki = TestPki::new("private");
    let other = TestPki::new("other");
    let receiver = Receiver::start_tls(Protocol::Http, pki.server(true));
    let (cert, _) = pki.client_files();
    let (_, other_key) = other.client_files();
    for protocol in [gpuspan::Protocol::Grpc, gpuspan::Protocol::HttpProtobuf] {
        let error = setup::to_receiver(&receiver)
            .protocol(protocol)
            .certificate(pki.ca_file())
            .client_certificate(&cert)
            .client_key(&other_key)
            .build()
            .err()
            .unwrap_or_else(|| panic!("{protocol:?}: a key of another certificate was taken"))
            .to_string();
        assert!(
            error.contains("client_key")
                && error.contains(&other_key.display().to_string())
                && error.contains("does not go with"),
            "{protocol:?}: {error}"
        );
    }
}

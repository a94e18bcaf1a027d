//! `https://` OTLP endpoints over gRPC and HTTP, with a CA made in the test
//! (`certificate`), a client certificate where the receiver asks for one (mutual TLS),
//! and a wrong CA: refused, every span counted as lost, and the error naming the endpoint
//! and the CA.

use gpuspan_test_support as support;

use std::time::Duration;

use gpuspan::Builder;
use support::receiver::{Protocol, Receiver};
use support::setup;
use support::tls::TestPki;

const STEPS: u64 = 3;

fn delivered_with_the_ca(protocol: Protocol, mutual: bool) {
    let pki = TestPki::new("private");
    let receiver = Receiver::start_tls(protocol, pki.server(mutual));
    assert!(receiver.endpoint().starts_with("https://127.0.0.1:"));
    let mut builder = setup::to_receiver(&receiver).certificate(pki.ca_file());
    if mutual {
        let (cert, key) = pki.client_files();
        builder = builder.client_certificate(cert).client_key(key);
    }
    let (tally, result) = setup::train_and_shut_down(builder, STEPS);
    result.expect("every span and point delivered over TLS");
    assert_eq!(receiver.spans_named("step").len(), STEPS as usize);
    assert_eq!(receiver.spans_named("epoch").len(), 1);
    assert_eq!(tally, (STEPS + 1, 0));
    assert!(
        !receiver.points_named("process.memory.usage").is_empty(),
        "metrics arrive over TLS too"
    );
}

#[test]
fn grpc_with_the_test_ca() {
    delivered_with_the_ca(Protocol::Grpc, false);
}

#[test]
fn http_with_the_test_ca() {
    delivered_with_the_ca(Protocol::Http, false);
}

#[test]
fn grpc_with_a_client_certificate() {
    delivered_with_the_ca(Protocol::Grpc, true);
}

#[test]
fn http_with_a_client_certificate() {
    delivered_with_the_ca(Protocol::Http, true);
}

/// Spans sent where the handshake fails are all lost, and the error says why.
fn refused(protocol: Protocol, builder: impl FnOnce(Builder, &TestPki) -> Builder) -> String {
    let pki = TestPki::new("server's");
    let receiver = Receiver::start_tls(protocol, pki.server(true));
    let builder = builder(
        setup::to_receiver(&receiver).timeout(Duration::from_millis(1500)),
        &pki,
    );
    let (tally, result) = setup::train_and_shut_down(builder, STEPS);
    let error = result.expect_err("nothing is delivered").to_string();
    assert!(receiver.spans_named("step").is_empty());
    assert_eq!(tally, (0, STEPS + 1), "{error}");
    assert!(error.contains(&receiver.endpoint()), "{error}");
    error
}

fn a_wrong_ca_is_refused(protocol: Protocol) {
    let other = TestPki::new("other");
    let error = refused(protocol, |builder, pki| {
        let (cert, key) = pki.client_files();
        builder
            .certificate(other.ca_file())
            .client_certificate(cert)
            .client_key(key)
    });
    let ca = other.ca_file().display().to_string();
    assert!(
        error.contains("TLS handshake") && error.contains(&ca),
        "names the handshake and the CA: {error}"
    );
}

#[test]
fn grpc_with_a_wrong_ca_loses_every_span_and_names_the_ca() {
    a_wrong_ca_is_refused(Protocol::Grpc);
}

#[test]
fn http_with_a_wrong_ca_loses_every_span_and_names_the_ca() {
    a_wrong_ca_is_refused(Protocol::Http);
}

/// Under TLS 1.3 the server refuses a missing client certificate after the client's side
/// of the handshake, so the client may see only a closed connection: the spans are lost
/// and the endpoint named, though not always as a handshake.
#[test]
fn without_the_client_certificate_a_mutual_tls_receiver_refuses() {
    for protocol in [Protocol::Grpc, Protocol::Http] {
        refused(protocol, |builder, pki| builder.certificate(pki.ca_file()));
    }
}

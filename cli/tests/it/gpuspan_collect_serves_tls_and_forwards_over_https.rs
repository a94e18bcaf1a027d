//! `gpuspan collect` with `--tls-cert`/`--tls-key` takes a program's spans over TLS, and
//! forwards them to an `https://` target checked against a CA made in the test; a
//! certificate file that is not one stops it before it listens.

use gpuspan_test_support as support;

use std::time::Duration;

use support::receiver::{Protocol, Receiver};
use support::setup;
use support::tls::TestPki;

#[test]
fn a_program_s_step_reaches_an_https_backend_through_a_tls_collector_over_http() {
    step_through_a_tls_collector(gpuspan::Protocol::HttpProtobuf);
}

#[test]
fn a_program_s_step_reaches_an_https_backend_through_a_tls_collector_over_grpc() {
    step_through_a_tls_collector(gpuspan::Protocol::Grpc);
}

fn step_through_a_tls_collector(sent_as: gpuspan::Protocol) {
    let pki = TestPki::new("node");
    let backend = Receiver::start_tls(Protocol::Grpc, pki.server(false));
    let runs = tempfile::tempdir().unwrap();
    let collector = gpuspan_cli::collect::Collector::builder()
        .grpc_addr(Some("127.0.0.1:0".parse().unwrap()))
        .http_addr(Some("127.0.0.1:0".parse().unwrap()))
        .nvml_lib("/nonexistent/libnvidia-ml.so.1")
        .run_dir(runs.path())
        .endpoint(backend.endpoint())
        .protocol(gpuspan::Protocol::Grpc)
        .certificate(pki.ca_file())
        .tls(Some(pki.server_files()))
        .start()
        .unwrap();

    let builder = gpuspan::Telemetry::builder()
        .nvml_lib("/nonexistent/libnvidia-ml.so.1")
        .sysfs_root("/nonexistent/sys")
        .service_name("tls-trainer")
        .endpoint(match sent_as {
            gpuspan::Protocol::Grpc => format!("https://{}", collector.grpc_addr().unwrap()),
            _ => format!("https://{}", collector.http_addr().unwrap()),
        })
        .protocol(sent_as)
        .certificate(pki.ca_file())
        .summary(false);
    let (telemetry, ()) = setup::run(builder, |_| {
        let _step = gpuspan::step_span!(0);
        std::thread::sleep(Duration::from_millis(20));
    });
    telemetry
        .shutdown()
        .expect("the collector took the span over TLS");
    let stats = collector.shutdown(Duration::from_secs(5));

    let spans = backend.wait_for_spans(|s| !s.is_empty(), Duration::from_secs(5));
    assert!(spans.iter().any(|s| s.name == "step"), "{spans:?}");
    assert_eq!(stats.spans_forwarded, 1, "{stats:?}");
}

#[test]
fn a_tls_cert_that_is_not_a_certificate_is_an_error_naming_the_flag_and_the_file() {
    let pki = TestPki::new("node");
    let (_, key) = pki.server_files();
    let started = gpuspan_cli::collect::Collector::builder()
        .grpc_addr(None)
        .http_addr(Some("127.0.0.1:0".parse().unwrap()))
        .nvml_lib("/nonexistent/libnvidia-ml.so.1")
        .run_dir(pki.dir())
        .tls(Some((key.clone(), key.clone())))
        .start();
    let Err(error) = started else {
        panic!("a key given as --tls-cert was served");
    };
    let error = error.to_string();
    assert!(
        error.contains("--tls-cert") && error.contains(&key.display().to_string()),
        "{error}"
    );
}

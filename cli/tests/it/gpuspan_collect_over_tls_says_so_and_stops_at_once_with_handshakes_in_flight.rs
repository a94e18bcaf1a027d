//! `gpuspan collect --tls-cert --tls-key` as a user meets it: its first line says the
//! receivers serve TLS; connections that never send a ClientHello hold neither the accept
//! loop (a program still gets its spans through) nor SIGTERM; `--tls-cert` without
//! `--tls-key` is a usage error naming the missing flag; a key of another certificate is
//! refused naming `--tls-key`.

use gpuspan_test_support as support;

use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::time::{Duration, Instant};

use support::collector_process::CollectorProcess;
use support::fake_nvml::FakeNvml;
use support::setup;
use support::tls::TestPki;

const BINARY: &str = env!("CARGO_BIN_EXE_gpuspan");

/// `gpuspan collect` on the fake NVML (its first line is then the banner), with `args`.
fn start_collector(fake: &FakeNvml, args: &[&str], dir: &std::path::Path) -> CollectorProcess {
    let lib = fake.path().to_string_lossy().into_owned();
    CollectorProcess::start(
        BINARY,
        args,
        &[
            ("GPUSPAN_NVML_LIB", &lib),
            ("OTEL_METRICS_EXPORTER", "none"),
        ],
        dir,
    )
}

fn tls_collector(fake: &FakeNvml, pki: &TestPki) -> CollectorProcess {
    let (cert, key) = pki.server_files();
    start_collector(
        fake,
        &[
            "--tls-cert",
            cert.to_str().unwrap(),
            "--tls-key",
            key.to_str().unwrap(),
        ],
        pki.dir(),
    )
}

/// TCP connections that send nothing: each one's TLS handshake waits for a ClientHello.
fn silent(addr: SocketAddr, count: usize) -> Vec<TcpStream> {
    (0..count)
        .map(|_| TcpStream::connect_timeout(&addr, Duration::from_secs(5)).unwrap())
        .collect()
}

#[test]
fn the_first_line_says_the_receivers_serve_tls() {
    let pki = TestPki::new("node");
    let fake = FakeNvml::build();
    let collector = tls_collector(&fake, &pki);
    let banner = collector.banner.clone();
    assert!(
        banner.contains("TLS")
            && banner.contains(&format!("https://{}", collector.grpc))
            && banner.contains(&format!("https://{}", collector.http)),
        "{banner}"
    );
    let (status, _) = collector.stop();
    assert!(status.success(), "{status}");

    let plain = start_collector(&fake, &[], pki.dir());
    assert!(!plain.banner.contains("TLS"), "{}", plain.banner);
}

#[test]
fn silent_connections_hold_neither_a_program_s_spans_nor_sigterm() {
    let pki = TestPki::new("node");
    let fake = FakeNvml::build();
    let collector = tls_collector(&fake, &pki);
    let _grpc = silent(collector.grpc, 20);
    let _http = silent(collector.http, 20);

    // A program's span still gets through while they wait.
    let builder = gpuspan::Telemetry::builder()
        .endpoint(format!("https://{}", collector.http))
        .protocol(gpuspan::Protocol::HttpProtobuf)
        .certificate(pki.ca_file())
        .nvml_lib("/nonexistent/libnvidia-ml.so.1")
        .sysfs_root("/nonexistent/sys")
        .summary(false);
    let (telemetry, ()) = setup::run(builder, |_| {
        let _step = gpuspan::step_span!(0);
    });
    telemetry
        .shutdown()
        .expect("the span got through beside the silent connections");

    // SIGTERM with their handshakes in flight: the collector stops at once, as it does with
    // idle plain-text connections, not after each receiver's grace for open connections.
    let started = Instant::now();
    let (status, summary) = collector.stop();
    let took = started.elapsed();
    assert!(status.success(), "{status}: {summary}");
    assert!(summary.contains("1 spans received"), "{summary}");
    assert!(
        took < Duration::from_secs(3),
        "SIGTERM took {took:?} with TLS handshakes in flight"
    );
}

#[test]
fn tls_cert_without_tls_key_is_a_usage_error_naming_the_missing_flag() {
    let pki = TestPki::new("node");
    let (cert, _) = pki.server_files();
    let out = Command::new(BINARY)
        .args(["collect", "--tls-cert", cert.to_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--tls-key"), "{stderr}");
}

#[test]
fn a_key_of_another_certificate_or_an_encrypted_key_is_refused_naming_tls_key() {
    let pki = TestPki::new("node");
    let other = TestPki::new("other");
    let (cert, _) = pki.server_files();
    let (_, other_key) = other.server_files();
    let encrypted = pki.dir().join("locked.key");
    std::fs::write(
        &encrypted,
        "-----BEGIN ENCRYPTED PRIVATE KEY-----\nMIGbMFcGCSqGSIb3DQEFDTBKMCkGCSqGSIb3DQEFDDAcBAgAAAAAAAAAAAICCAAw\n\
         -----END ENCRYPTED PRIVATE KEY-----\n",
    )
    .unwrap();
    for (key, says) in [
        (&other_key, "does not go with the certificate"),
        (&encrypted, "encrypted"),
    ] {
        let started = gpuspan_cli::collect::Collector::builder()
            .grpc_addr(None)
            .http_addr(Some("127.0.0.1:0".parse().unwrap()))
            .nvml_lib("/nonexistent/libnvidia-ml.so.1")
            .run_dir(pki.dir())
            .tls(Some((cert.clone(), key.clone())))
            .start();
        let Err(error) = started else {
            panic!(
                "{} was served as the key of {}",
                key.display(),
                cert.display()
            );
        };
        let error = error.to_string();
        assert!(
            error.contains("--tls-key")
                && error.contains(&key.display().to_string())
                && error.contains(says),
            "{error}"
        );
    }
}

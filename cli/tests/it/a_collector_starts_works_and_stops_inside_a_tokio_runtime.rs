//! A `Collector` can be started, used, shut down and dropped from async code: inside
//! `#[tokio::main]` or `#[tokio::test]`, of either flavour, it never panics for blocking
//! inside a runtime, and the spans it receives are forwarded.

use gpuspan_test_support as support;

use gpuspan_cli::collect::Collector;
use support::fake_nvml::FakeNvml;
use support::otlp_json::{one_span, send};
use support::traces::read_spans;

fn start(fake: &FakeNvml, runs: &std::path::Path) -> Collector {
    Collector::builder()
        .grpc_addr(None)
        .http_addr(Some("127.0.0.1:0".parse().unwrap()))
        .nvml_lib(fake.path())
        .run_dir(runs)
        .start()
        .unwrap()
}

/// Sends one OTLP/JSON span over HTTP and checks the collector answered 200.
fn send_a_span(collector: &Collector, name: &str) {
    let request = one_span(name, 1_700_000_000_000_000_000, 1_700_000_000_100_000_000);
    send(collector.http_addr().unwrap(), &request);
}

/// The names of the spans in the run directories under `runs`.
fn spans_written(runs: &std::path::Path) -> Vec<String> {
    let mut names = Vec::new();
    for run in std::fs::read_dir(runs).unwrap() {
        for span in read_spans(&run.unwrap().path().join("traces.jsonl")) {
            names.push(span["name"].as_str().unwrap().to_owned());
        }
    }
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_multi_thread_runtime_start_use_and_shutdown_work() {
    let fake = FakeNvml::build();
    let runs = tempfile::tempdir().unwrap();
    let collector = start(&fake, runs.path());
    send_a_span(&collector, "generate");
    let stats = collector.shutdown(std::time::Duration::from_secs(5));
    assert_eq!(stats.spans_received, 1, "{stats:?}");
    assert_eq!(stats.spans_forwarded, 1, "{stats:?}");
    assert_eq!(spans_written(runs.path()), ["generate"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_a_multi_thread_runtime_a_dropped_collector_forwards_what_it_received() {
    let fake = FakeNvml::build();
    let runs = tempfile::tempdir().unwrap();
    let collector = start(&fake, runs.path());
    send_a_span(&collector, "generate");
    drop(collector);
    assert_eq!(spans_written(runs.path()), ["generate"]);
}

#[tokio::test(flavor = "current_thread")]
async fn in_a_current_thread_runtime_start_use_and_shutdown_work() {
    let fake = FakeNvml::build();
    let runs = tempfile::tempdir().unwrap();
    let collector = start(&fake, runs.path());
    send_a_span(&collector, "decode");
    // The test's own runtime keeps running tasks while a collector serves.
    let answer = tokio::spawn(async { 6 * 7 }).await.unwrap();
    assert_eq!(answer, 42);
    let stats = collector.shutdown(std::time::Duration::from_secs(5));
    assert_eq!(stats.spans_forwarded, 1, "{stats:?}");
    assert_eq!(spans_written(runs.path()), ["decode"]);
}

#[tokio::test(flavor = "current_thread")]
async fn in_a_current_thread_runtime_a_dropped_collector_forwards_what_it_received() {
    let fake = FakeNvml::build();
    let runs = tempfile::tempdir().unwrap();
    let collector = start(&fake, runs.path());
    send_a_span(&collector, "decode");
    drop(collector);
    assert_eq!(spans_written(runs.path()), ["decode"]);
}

//! A span made by gpuspan's own macros already carries its memory: the collector forwards it
//! as it came, without looking it up in its own timeline.

use gpuspan_test_support as support;

use std::time::Duration;

use support::fake_nvml::{FakeNvml, DEFAULT_TOTAL, MIB};
use support::receiver::Receiver;
use support::setup;

#[test]
fn a_step_span_keeps_the_figures_it_was_sent_with() {
    // Two separate fake GPUs: what the program saw (1234 MiB) and what the collector sees
    // (5000 MiB), so a span looked up again would show it.
    let collector_gpu = FakeNvml::build();
    collector_gpu.set_memory(0, 5000 * MIB, DEFAULT_TOTAL);
    let program_gpu = FakeNvml::build();
    program_gpu.set_memory(0, 1234 * MIB, DEFAULT_TOTAL);
    let backend = Receiver::start_grpc();
    let runs = tempfile::tempdir().unwrap();
    let collector = gpuspan_cli::collect::Collector::builder()
        .grpc_addr(None)
        .http_addr(Some("127.0.0.1:0".parse().unwrap()))
        .nvml_lib(collector_gpu.path())
        .run_dir(runs.path())
        .endpoint(backend.endpoint())
        .protocol(gpuspan::Protocol::Grpc)
        .start()
        .unwrap();

    let builder = gpuspan::Telemetry::builder()
        .nvml_lib(program_gpu.path())
        .service_name("rust-trainer")
        .endpoint(format!("http://{}", collector.http_addr().unwrap()))
        .protocol(gpuspan::Protocol::Grpc)
        .summary(false);
    let (telemetry, ()) = setup::run(builder, |_| {
        let _step = gpuspan::step_span!(0);
        std::thread::sleep(Duration::from_millis(30));
    });
    telemetry.shutdown().unwrap();
    let stats = collector.shutdown(Duration::from_secs(5));

    let spans = backend.wait_for_spans(|s| !s.is_empty(), Duration::from_secs(5));
    let step = spans
        .iter()
        .find(|s| s.name == "step")
        .expect("the step span");
    assert_eq!(step.int_attr("gpu.memory.peak"), Some(1234 * MIB as i64));
    assert_eq!(step.int_attr("gpu.memory.start"), Some(1234 * MIB as i64));
    assert_eq!(step.int_attr("gpu.memory.resolution"), None);
    assert_eq!(stats.spans_passed, 1, "{stats:?}");
    assert_eq!(stats.spans_enriched, 0, "{stats:?}");
    assert_eq!(stats.spans_forwarded, 1, "{stats:?}");
}

//! `gpuspan collect` receives OTLP/JSON over HTTP, writes the span with its GPU memory to
//! the run directory, and on SIGTERM stops and prints what it did.

use gpuspan_test_support as support;

use support::fake_nvml::{FakeNvml, MIB};
use support::json_collector::collect_one_span;
use support::otlp_json::int;

#[test]
fn a_json_span_gets_the_devices_memory_and_sigterm_stops_the_collector() {
    let fake = FakeNvml::build();
    let dir = tempfile::tempdir().unwrap();
    let collected = collect_one_span(env!("CARGO_BIN_EXE_gpuspan"), dir.path(), |command| {
        command
            .env("GPUSPAN_NVML_LIB", fake.path())
            .env("FAKE_NVML_DEVICES", "2")
            .env("FAKE_NVML_USED_MIB", "1500");
    });
    assert_eq!(
        collected.reply.header("content-type"),
        Some("application/json")
    );
    let rest = &collected.summary;
    assert!(
        rest.contains("1 spans received, 1 given GPU memory"),
        "{rest}"
    );

    let span = &collected.span;
    assert_eq!(span["name"], "generate");
    let (two, one) = (3000 * MIB as i64, 1500 * MIB as i64);
    assert_eq!(int(span, "gpu.memory.start"), Some(two), "{span:#}");
    assert_eq!(int(span, "gpu.memory.peak"), Some(two));
    assert_eq!(int(span, "gpu.memory.end"), Some(two));
    assert_eq!(int(span, "gpu.memory.delta"), Some(0));
    assert_eq!(int(span, "gpu.0.memory.peak"), Some(one));
    assert_eq!(int(span, "gpu.1.memory.peak"), Some(one));
    assert!(
        metrics_written(&collected.run),
        "the collector's own gauges"
    );
}

fn metrics_written(run: &std::path::Path) -> bool {
    std::fs::read_to_string(run.join("metrics.jsonl"))
        .is_ok_and(|text| text.contains("hw.gpu.memory.usage"))
}

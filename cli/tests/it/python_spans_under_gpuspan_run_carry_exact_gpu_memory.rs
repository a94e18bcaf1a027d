//! A Python program instrumented with the OpenTelemetry SDK alone (OTLP over gRPC or HTTP)
//! runs under `gpuspan run`; the spans that reach the backend carry the exact GPU memory of
//! their own windows, a spike of a few sampling intervals included, and the program's own
//! memory from its PID. The `run` span covers the command and its process tree.

use gpuspan_test_support as support;

use std::process::Command;
use std::time::Duration;

use support::fake_nvml::{FakeNvml, MIB};
use support::receiver::{Protocol, ReceivedSpan, Receiver};

struct Run {
    spans: Vec<ReceivedSpan>,
    code: Option<i32>,
    stderr: String,
}

fn train(child_protocol: &str, forward: Protocol) -> Run {
    let python = support::python_otel::python();
    let fake = FakeNvml::build();
    let dir = tempfile::tempdir().unwrap();
    let live = dir.path().join("gpu");
    std::fs::write(&live, format!("used 0 {}\n", 1000 * MIB)).unwrap();
    let receiver = Receiver::start(forward);
    let out = Command::new(env!("CARGO_BIN_EXE_gpuspan"))
        .args(["run", "--protocol", child_protocol, "--"])
        .arg(&python)
        .arg(support::python_otel::train_py())
        .current_dir(dir.path())
        .env("GPUSPAN_NVML_LIB", fake.path())
        .env("FAKE_NVML_LIVE_FILE", &live)
        .env("GPUSPAN_SAMPLE_INTERVAL", "10ms")
        // Exact process figures over spans of a few ticks need the lists at every tick: a
        // driver whose lists are cheap, even when the suite runs at a real one's latencies.
        .env(
            "FAKE_NVML_LATENCY_US",
            "nvmlDeviceGetComputeRunningProcesses_v3:0",
        )
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.endpoint())
        .env(
            "OTEL_EXPORTER_OTLP_PROTOCOL",
            match forward {
                Protocol::Grpc => "grpc",
                _ => "http/protobuf",
            },
        )
        .env_remove("OTEL_SERVICE_NAME")
        .env("TRAIN_EXIT_CODE", "3")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let spans = receiver.wait_for_spans(
        |spans| spans.iter().any(|s| s.name == "run"),
        Duration::from_secs(10),
    );
    Run {
        spans,
        code: out.status.code(),
        stderr,
    }
}

fn named<'a>(spans: &'a [ReceivedSpan], name: &str) -> Vec<&'a ReceivedSpan> {
    spans.iter().filter(|s| s.name == name).collect()
}

fn mib(span: &ReceivedSpan, key: &str) -> Option<i64> {
    span.int_attr(key).map(|bytes| {
        assert_eq!(bytes % MIB as i64, 0, "{key} = {bytes} is not a whole MiB");
        bytes / MIB as i64
    })
}

fn check(run: &Run) {
    let context = format!("stderr:\n{}\nspans: {:#?}", run.stderr, run.spans);
    assert_eq!(run.code, Some(3), "{context}");
    let steps = named(&run.spans, "step");
    assert_eq!(steps.len(), 3, "{context}");
    // (step, device start, peak, end, this process's start, peak, end) in MiB.
    let expected = [
        (0, 1000, 2000, 2000, 500, 1000, 1000),
        (1, 2000, 8000, 2100, 1000, 7000, 1100),
        (2, 2100, 2200, 2200, 1100, 1200, 1200),
    ];
    for (step, start, peak, end, p_start, p_peak, p_end) in expected {
        let span = steps
            .iter()
            .find(|s| s.int_attr("ml.step") == Some(step))
            .unwrap_or_else(|| panic!("no step {step}: {context}"));
        let got = [
            "gpu.memory.start",
            "gpu.memory.peak",
            "gpu.memory.end",
            "gpu.memory.delta",
            "gpu.process.memory.start",
            "gpu.process.memory.peak",
            "gpu.process.memory.end",
        ]
        .map(|k| mib(span, k));
        let want = [start, peak, end, end - start, p_start, p_peak, p_end].map(Some);
        assert_eq!(got, want, "step {step}: {span:#?}\n{}", run.stderr);
        assert_eq!(span.int_attr("gpu.memory.resolution"), Some(10_000_000));
        // The instant fake's lists are cheap, so they run at every tick.
        assert_eq!(
            span.int_attr("gpu.process.memory.resolution"),
            Some(10_000_000)
        );
        assert_eq!(span.str_attr("gpu.memory.source"), Some("nvml"));
        assert!(
            span.int_attr("gpu.memory.samples").unwrap() >= 5,
            "{span:#?}"
        );
    }
    let epoch = named(&run.spans, "epoch");
    let epoch = epoch
        .first()
        .unwrap_or_else(|| panic!("no epoch: {context}"));
    assert_eq!(
        ["gpu.memory.start", "gpu.memory.peak", "gpu.memory.end"].map(|k| mib(epoch, k)),
        [Some(1000), Some(8000), Some(2200)]
    );

    let run_span = named(&run.spans, "run");
    let run_span = run_span.first().unwrap();
    assert!(
        epoch.is_child_of(run_span),
        "TRACEPARENT was not followed: {context}"
    );
    assert_eq!(run_span.int_attr("process.exit.code"), Some(3));
    assert_eq!(run_span.resource_str_attr("service.name"), Some("train"));
    assert_eq!(epoch.resource_str_attr("service.name"), Some("train"));
    // The process tree: the program (7000 MiB at the spike) and its worker (300 MiB).
    assert_eq!(
        mib(run_span, "gpu.process.memory.peak"),
        Some(7300),
        "{run_span:#?}"
    );
    assert_eq!(
        run_span.int_attr("gpu.process.memory.resolution"),
        Some(10_000_000),
        "{run_span:#?}"
    );
    assert_eq!(mib(run_span, "gpu.memory.peak"), Some(8000));
    // Per-process figures were looked up by the program's own pid.
    let pid = run_span.int_attr("process.pid").unwrap();
    assert_eq!(
        steps[0]
            .resource_attributes
            .get("process.pid")
            .and_then(|v| v.as_int()),
        Some(pid)
    );
    assert!(run.stderr.contains("exited with code 3"), "{}", run.stderr);
    assert!(run.stderr.contains("peak 8000 MiB"), "{}", run.stderr);
}

#[test]
fn over_grpc_forwarded_over_grpc() {
    check(&train("grpc", Protocol::Grpc));
}

#[test]
fn over_http_forwarded_over_http() {
    check(&train("http/protobuf", Protocol::Http));
}

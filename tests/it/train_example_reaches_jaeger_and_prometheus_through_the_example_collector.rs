//! The `train` example ships over OTLP (gRPC and HTTP) to an OpenTelemetry Collector built from
//! the official Go modules and running collector/otelcol.yaml as users run it, with only its
//! addresses set through the variables it reads. The collector exports the traces to Jaeger v2
//! (and to an OTLP receiver standing in for Tempo) and serves the gauges on its Prometheus
//! exporter. Read back: from Jaeger's query API every epoch and step span with its memory
//! attributes as integers equal to the fake GPUs' figures, each step under its epoch; from the
//! Prometheus exporter the per-device gauges with their exact values and the run labels that
//! the configuration's transform processor adds.

use gpuspan_test_support as support;

use std::time::Duration;

use support::example::Train;
use support::fake_nvml::{uuid_of, FakeNvml, DEFAULT_TOTAL, MIB};
use support::go_stack::BaseStack;
use support::jaeger_api::JaegerSpan;
use support::prometheus_text::{named, Sample};

const EPOCHS: usize = 2;
const STEPS: usize = 5;
/// Device 0 uses this much (FAKE_NVML_USED_MIB) ...
const DEVICE0_MIB: u64 = 3000;
/// ... and device 1 this much (a fake NVML timeline entry at 0 ms), so that a mix-up of
/// devices shows.
const DEVICE1_MIB: u64 = 5000;
const RUN_ID: &str = "otelcol-run";

fn ship(protocol: &str) {
    let dir = tempfile::tempdir().unwrap();
    let service = format!("train-via-otelcol-{}", protocol.replace('/', "-"));
    let BaseStack {
        mut jaeger,
        tempo,
        mut collector,
    } = BaseStack::start(dir.path());

    let fake = FakeNvml::build();
    let timeline = dir.path().join("timeline");
    std::fs::write(&timeline, format!("0 1 {}\n", DEVICE1_MIB * MIB)).unwrap();
    let stderr = Train::new(EPOCHS, STEPS, dir.path())
        .otlp(&collector.otlp_endpoint(protocol), protocol)
        .named(&service, RUN_ID)
        .on_fake(&fake, DEVICE0_MIB)
        .env("FAKE_NVML_DEVICES", "2")
        .env("FAKE_NVML_TIMELINE", timeline.to_str().unwrap())
        .run();
    assert!(
        !stderr.contains("could not export"),
        "train could not export to the collector:\n{stderr}\ncollector:\n{}",
        collector.log_tail()
    );

    let expected = EPOCHS + EPOCHS * STEPS;
    let training = |operation: &str| operation == "epoch" || operation == "step";
    let spans = jaeger.wait_for_spans(&service, Duration::from_secs(30), |spans| {
        spans.iter().filter(|s| training(&s.operation)).count() >= expected
    });
    let spans: Vec<JaegerSpan> = spans
        .into_iter()
        .filter(|s| training(&s.operation))
        .collect();
    assert_eq!(
        spans.len(),
        expected,
        "epoch and step spans in Jaeger: {spans:#?}\ncollector:\n{}\njaeger:\n{}",
        collector.log_tail(),
        jaeger.log_tail()
    );
    check_spans(&spans);

    // The same traces went to the second trace backend of the pipeline.
    let at_tempo = tempo.wait_for_spans(
        |s| s.iter().filter(|s| training(&s.name)).count() >= expected,
        Duration::from_secs(30),
    );
    let at_tempo = at_tempo.iter().filter(|s| training(&s.name)).count();
    assert_eq!(
        at_tempo, expected,
        "epoch and step spans at the Tempo endpoint"
    );

    let samples = collector.wait_for_samples(Duration::from_secs(30), |samples| {
        named(samples, "hw_gpu_memory_usage_bytes")
            .iter()
            .filter(|s| s.labels.get("job") == Some(&service))
            .count()
            >= 2
    });
    check_gauges(&samples, &service);
}

fn check_spans(spans: &[JaegerSpan]) {
    let used = |mib: u64| (mib * MIB) as i64;
    let total = used(DEVICE0_MIB + DEVICE1_MIB);
    let epochs: Vec<&JaegerSpan> = spans.iter().filter(|s| s.operation == "epoch").collect();
    let steps: Vec<&JaegerSpan> = spans.iter().filter(|s| s.operation == "step").collect();
    assert_eq!(epochs.len(), EPOCHS, "epoch spans");
    assert_eq!(steps.len(), EPOCHS * STEPS, "step spans");
    for span in &epochs.iter().chain(&steps).collect::<Vec<_>>() {
        assert_eq!(span.process_str("ml.run.id"), Some(RUN_ID), "{span:?}");
        for (key, value) in [
            ("gpu.memory.start", total),
            ("gpu.memory.peak", total),
            ("gpu.memory.end", total),
            ("gpu.memory.delta", 0),
            ("gpu.0.memory.peak", used(DEVICE0_MIB)),
            ("gpu.1.memory.peak", used(DEVICE1_MIB)),
        ] {
            assert_eq!(
                span.int_tag(key),
                Some(value),
                "{key} of {} {} is an int64 tag equal to the fake GPUs' figure: {:?}",
                span.operation,
                span.span_id,
                span.tags.get(key)
            );
        }
        assert!(
            span.int_tag("process.memory.peak").is_some_and(|v| v > 0),
            "process.memory.peak is a positive int64: {:?}",
            span.tags.get("process.memory.peak")
        );
    }
    let mut epoch_indexes: Vec<i64> = epochs
        .iter()
        .filter_map(|e| e.int_tag("ml.epoch"))
        .collect();
    epoch_indexes.sort();
    assert_eq!(epoch_indexes, [0, 1], "ml.epoch of the epoch spans");
    for epoch in &epochs {
        assert!(
            epoch.parent_span_id.is_empty(),
            "an epoch is a root span: {epoch:?}"
        );
        let mut step_indexes: Vec<i64> = steps
            .iter()
            .filter(|s| s.parent_span_id == epoch.span_id)
            .map(|s| {
                assert_eq!(s.trace_id, epoch.trace_id, "a step is in its epoch's trace");
                s.int_tag("ml.step").expect("ml.step is an int64")
            })
            .collect();
        step_indexes.sort();
        assert_eq!(
            step_indexes,
            (0..STEPS as i64).collect::<Vec<_>>(),
            "the steps whose parent is epoch {}",
            epoch.span_id
        );
    }
}

fn check_gauges(samples: &[Sample], service: &str) {
    let ours: Vec<Sample> = samples
        .iter()
        .filter(|s| s.labels.get("job").map(String::as_str) == Some(service))
        .cloned()
        .collect();
    for (metric, device0, device1) in [
        (
            "hw_gpu_memory_usage_bytes",
            DEVICE0_MIB * MIB,
            DEVICE1_MIB * MIB,
        ),
        (
            "gpu_memory_peak_bytes",
            DEVICE0_MIB * MIB,
            DEVICE1_MIB * MIB,
        ),
        ("hw_gpu_memory_limit_bytes", DEFAULT_TOTAL, DEFAULT_TOTAL),
    ] {
        let found = named(&ours, metric);
        assert_eq!(found.len(), 2, "one {metric} series per device: {ours:#?}");
        for (index, expected) in [(0, device0), (1, device1)] {
            let uuid = uuid_of(index);
            let sample = found
                .iter()
                .find(|s| s.labels.get("hw_id") == Some(&uuid))
                .unwrap_or_else(|| panic!("no {metric} for {uuid}: {found:#?}"));
            assert_eq!(sample.value, expected as f64, "{metric} of device {index}");
            assert_eq!(
                sample.labels.get("gpu_index").map(String::as_str),
                Some(index.to_string().as_str())
            );
            // Copied from the resource by the configuration's transform processor.
            assert_eq!(
                sample.labels.get("ml_run_id").map(String::as_str),
                Some(RUN_ID),
                "{sample:?}"
            );
            assert!(
                sample
                    .labels
                    .get("host_name")
                    .is_some_and(|h| !h.is_empty()),
                "{sample:?}"
            );
        }
    }
}

support::tests_over_grpc_and_http!(ship);

//! Epoch and step spans with integer memory attributes, and the GPU gauges, arrive at a real
//! OTLP receiver over both transports, with the resource and the headers that were set.

use gpuspan_test_support as support;

use std::time::Duration;

use support::receiver::{MetricKind, Receiver};
use support::scripted::scripted;
use support::setup;

const MB: u64 = 1 << 20;

fn train_and_check(receiver: Receiver) {
    let (source, script) = scripted(2, 100 * MB);
    script.set_process(Some(40 * MB));
    let builder = setup::to_receiver(&receiver)
        .memory_source(source)
        .sample_interval(Duration::from_millis(2))
        .header("x-api-key", "secret-1")
        .resource_attribute("deployment.environment", "test");
    let (telemetry, ()) = setup::run(builder, |_| {
        for epoch in 0..2u32 {
            let _e = gpuspan::epoch_span!(epoch, lr = 0.1);
            for step in 0..3u64 {
                let _s = gpuspan::step_span!(step, batch_size = 64);
                script.set(1, (300 + 10 * step) * MB);
                script.wait_reads(2);
                script.set(1, 100 * MB);
                script.wait_reads(1);
            }
        }
    });
    telemetry.shutdown().expect("clean shutdown");

    // Spans: names, parent links, integer attributes.
    let epochs = receiver.spans_named("epoch");
    let steps = receiver.spans_named("step");
    assert_eq!(epochs.len(), 2);
    assert_eq!(steps.len(), 6);
    for epoch in &epochs {
        assert!(epoch.is_root());
        assert_eq!(epoch.double_attr("lr"), Some(0.1));
        let children: Vec<_> = steps.iter().filter(|s| s.is_child_of(epoch)).collect();
        assert_eq!(children.len(), 3, "three steps under each epoch");
        let epoch_peak = epoch.int_attr("gpu.memory.peak").unwrap();
        for step in &children {
            assert_eq!(step.int_attr("batch_size"), Some(64));
            let n = step.int_attr("ml.step").unwrap() as u64;
            // Device 0 holds 100 MB, device 1 spikes to 300 + 10 n MB during step n.
            assert_eq!(
                step.int_attr("gpu.memory.peak"),
                Some(((400 + 10 * n) * MB) as i64)
            );
            assert_eq!(
                step.int_attr("gpu.1.memory.peak"),
                Some(((300 + 10 * n) * MB) as i64)
            );
            assert_eq!(step.int_attr("gpu.0.memory.peak"), Some((100 * MB) as i64));
            assert!(step.int_attr("gpu.memory.peak").unwrap() <= epoch_peak);
            assert_eq!(
                step.int_attr("gpu.process.memory.peak"),
                Some((80 * MB) as i64),
                "this process's memory, summed over both devices"
            );
        }
        assert_eq!(epoch_peak, (420 * MB) as i64);
        let imbalance = epoch.double_attr("gpu.memory.imbalance").unwrap();
        assert!(
            (imbalance - (320.0 - 100.0) / 320.0).abs() < 1e-9,
            "{imbalance}"
        );
    }
    let step = &steps[0];
    assert_eq!(step.resource_str_attr("service.name"), Some("gpuspan-test"));
    assert_eq!(step.resource_str_attr("ml.run.id"), Some("test-run"));
    assert_eq!(
        step.resource_str_attr("deployment.environment"),
        Some("test")
    );
    assert!(step.resource_str_attr("host.name").is_some());
    assert_eq!(
        step.resource_attributes
            .get("process.pid")
            .and_then(|v| v.as_int()),
        Some(i64::from(std::process::id()))
    );

    // Metrics: the final collection at shutdown carries every instrument.
    let usage = receiver.points_named("hw.gpu.memory.usage");
    let device1 = usage
        .iter()
        .find(|p| p.str_attr("hw.id") == Some("GPU-scripted-1"))
        .expect("a usage point for device 1");
    assert_eq!(device1.unit, "By");
    assert!(matches!(device1.kind, MetricKind::Sum { monotonic: false }));
    assert_eq!(device1.as_int(), Some((100 * MB) as i64));
    assert_eq!(device1.str_attr("hw.type"), Some("gpu"));
    assert_eq!(device1.str_attr("hw.vendor"), Some("NVIDIA"));
    assert_eq!(device1.str_attr("hw.name"), Some("Scripted GPU"));
    assert_eq!(device1.int_attr("gpu.index"), Some(1));
    let limit = receiver.points_named("hw.gpu.memory.limit");
    assert!(limit.iter().all(|p| p.as_int() == Some(80 << 30)));
    let peak = receiver.points_named("gpu.memory.peak");
    let peak1 = peak
        .iter()
        .find(|p| p.int_attr("gpu.index") == Some(1))
        .expect("a peak point for device 1");
    assert_eq!(
        peak1.as_int(),
        Some((320 * MB) as i64),
        "the highest reading since the previous collection, though usage is back at 100 MB"
    );
    let utilization = receiver.points_named("hw.gpu.memory.utilization");
    let expected = (100 * MB) as f64 / (80u64 << 30) as f64;
    assert!(utilization
        .iter()
        .all(|p| (p.as_double().unwrap() - expected).abs() < 1e-12));
    let busy = receiver.points_named("hw.gpu.utilization");
    assert!(busy
        .iter()
        .all(|p| p.str_attr("hw.gpu.task") == Some("general")));
    assert_eq!(busy.len(), 2);
    assert!(
        receiver.points_named("process.memory.usage")[0]
            .as_int()
            .unwrap()
            > 0
    );
    let steps_histogram = &receiver.points_named("ml.step.duration")[0];
    assert_eq!(steps_histogram.unit, "s");
    assert_eq!(steps_histogram.count(), Some(6));
    assert_eq!(
        receiver.points_named("ml.epoch.duration")[0].count(),
        Some(2)
    );

    // Headers set in code reach the receiver on both signals.
    let headers = receiver.headers();
    assert!(!headers.is_empty());
    assert!(
        headers
            .iter()
            .all(|h| h.get("x-api-key") == Some("secret-1")),
        "{headers:?}"
    );
}

#[test]
fn over_grpc() {
    train_and_check(Receiver::start_grpc());
}

#[test]
fn over_http_protobuf() {
    train_and_check(Receiver::start_http());
}

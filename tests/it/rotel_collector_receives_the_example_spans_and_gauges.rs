//! The `train` example ships to a real collector, rotel (a Rust OpenTelemetry collector, the
//! no-Docker alternative of collector/rotel.sh), over gRPC and over HTTP: what rotel prints
//! has the epoch and step spans, each step under its epoch, the memory attributes as OTel
//! integers with the GPU's exact value, and the GPU gauges.

use gpuspan_test_support as support;

use std::process::Command;
use std::time::Duration;

use support::example::Train;
use support::fake_nvml::{uuid_of, FakeNvml, DEFAULT_TOTAL, MIB};
use support::rotel_debug::{int_value, DebugOutput};
use support::servers::{accepts, free_port, tools, Server};

const USED_MIB: u64 = 3000;
const EPOCHS: usize = 2;
const STEPS: usize = 5;

fn ship(protocol: &str) {
    let tools = tools();
    let dir = tempfile::tempdir().unwrap();
    let (grpc, http) = (free_port(), free_port());
    let mut command = Command::new(&tools.rotel);
    command.args([
        "start",
        "--otlp-grpc-endpoint",
        &format!("127.0.0.1:{grpc}"),
        "--otlp-http-endpoint",
        &format!("127.0.0.1:{http}"),
        "--exporter",
        "blackhole",
        "--debug-log",
        "traces",
        "--debug-log",
        "metrics",
        "--debug-log-verbosity",
        "detailed",
        "--pid-file",
        dir.path().join("rotel.pid").to_str().unwrap(),
        "--log-file",
        dir.path().join("rotel-agent.log").to_str().unwrap(),
    ]);
    let mut rotel = Server::start("rotel", command, &dir.path().join("rotel.out"));
    let port = if protocol == "grpc" { grpc } else { http };
    let addr = format!("127.0.0.1:{port}").parse().unwrap();
    rotel.wait_for("listening port", Duration::from_secs(20), |_| {
        accepts(addr).then_some(())
    });

    let fake = FakeNvml::build();
    Train::new(EPOCHS, STEPS, dir.path())
        .args(&["--batch-size", "16"])
        .otlp(&format!("http://{addr}"), protocol)
        .named("train-via-rotel", "rotel-run")
        .on_fake(&fake, USED_MIB)
        .run();

    // train flushed before exiting; rotel prints after its 200 ms batch timeout.
    let printed = rotel.wait_for(
        "debug output with every span and the gauges",
        Duration::from_secs(30),
        |rotel| {
            let printed = DebugOutput::parse(&rotel.output());
            let complete = printed.spans_named("epoch").len() == EPOCHS
                && printed.spans_named("step").len() == EPOCHS * STEPS
                && !printed.points_named("hw.gpu.memory.usage").is_empty()
                && !printed.points_named("gpu.memory.peak").is_empty();
            complete.then_some(printed)
        },
    );
    let text = rotel.stop();
    let used = (USED_MIB * MIB) as i64;

    let epochs = printed.spans_named("epoch");
    let steps = printed.spans_named("step");
    let mut epoch_indexes: Vec<i64> = epochs
        .iter()
        .filter_map(|e| e.int_attr("ml.epoch"))
        .collect();
    epoch_indexes.sort();
    assert_eq!(epoch_indexes, [0, 1], "ml.epoch of the epoch spans");
    for span in epochs.iter().chain(&steps) {
        assert_eq!(
            span.resource.get("service.name").map(String::as_str),
            Some("Str(train-via-rotel)")
        );
        assert_eq!(
            span.resource.get("ml.run.id").map(String::as_str),
            Some("Str(rotel-run)")
        );
        for key in ["gpu.memory.start", "gpu.memory.peak", "gpu.memory.end"] {
            assert_eq!(
                span.int_attr(key),
                Some(used),
                "{key} of {} {}: {:?}",
                span.name,
                span.span_id,
                span.attributes.get(key)
            );
        }
        let process_peak = span.attributes.get("process.memory.peak");
        assert!(
            process_peak
                .and_then(|v| int_value(v))
                .is_some_and(|v| v > 0),
            "process.memory.peak of {} is a positive Int: {process_peak:?}",
            span.name
        );
    }
    for epoch in &epochs {
        assert!(epoch.parent_id.is_empty(), "an epoch span is a root span");
        let children: Vec<_> = steps
            .iter()
            .filter(|s| s.parent_id == epoch.span_id)
            .collect();
        assert_eq!(
            children.len(),
            STEPS,
            "steps whose parent is epoch {}",
            epoch.span_id
        );
        let mut step_indexes: Vec<i64> = children
            .iter()
            .map(|s| {
                assert_eq!(s.trace_id, epoch.trace_id, "a step is in its epoch's trace");
                s.int_attr("ml.step").expect("ml.step is an Int")
            })
            .collect();
        step_indexes.sort();
        assert_eq!(step_indexes, (0..STEPS as i64).collect::<Vec<_>>());
    }

    let device = format!("Str({})", uuid_of(0));
    for (metric, expected) in [
        ("hw.gpu.memory.usage", USED_MIB * MIB),
        ("gpu.memory.peak", USED_MIB * MIB),
        ("hw.gpu.memory.limit", DEFAULT_TOTAL),
    ] {
        let points = printed.points_named(metric);
        assert!(!points.is_empty(), "no {metric} points in\n{text}");
        for point in points {
            assert_eq!(point.unit, "By", "{metric} is in bytes");
            assert_eq!(point.attributes.get("hw.id"), Some(&device), "{point:?}");
            assert_eq!(
                point.attributes.get("gpu.index").map(String::as_str),
                Some("Int(0)")
            );
            assert_eq!(
                point.value.parse::<f64>().ok(),
                Some(expected as f64),
                "{metric} value: {point:?}"
            );
        }
    }
}

support::tests_over_grpc_and_http!(ship);

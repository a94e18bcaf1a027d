//! The run directory's `timeline.bin` holds every value the sampler read, in order, at wall
//! clock times inside the spans that saw them; it can be turned off, and turned on for a
//! run that ships OTLP.

use gpuspan_test_support as support;

use std::time::Duration;

use gpuspan::runlog::Role;
use gpuspan::runlog::{read_timeline, Figure, TIMELINE_FILE};
use gpuspan_cli::report::Run;
use support::receiver::Receiver;
use support::scripted::scripted;
use support::setup;

const MB: u64 = 1 << 20;

#[test]
fn every_value_read_is_in_the_timeline_inside_its_step() {
    let runs = tempfile::tempdir().unwrap();
    let (source, script) = scripted(1, 100 * MB);
    let builder = gpuspan::Telemetry::builder()
        .run_dir(runs.path())
        .run_id("timeline")
        .summary(false)
        .memory_source(source)
        .sample_interval(Duration::from_millis(2));
    let values: Vec<u64> = (1..=10).map(|i| (100 + 37 * i) * MB + i).collect();
    let (telemetry, ()) = setup::run(builder, |_| {
        script.wait_reads(2);
        for (step, value) in values.iter().enumerate() {
            let _step = gpuspan::step_span!(step);
            script.set(0, *value);
            script.wait_reads(3);
            script.set(0, 100 * MB);
            script.wait_reads(3);
        }
    });
    telemetry.shutdown().expect("clean shutdown");
    let dir = runs.path().join("timeline");
    let run = Run::read(&dir).unwrap();
    let timeline = run
        .timeline
        .as_ref()
        .expect("timeline.bin is written by default");
    assert_eq!(timeline.devices.len(), 1);
    assert_eq!(timeline.devices[0].uuid, "GPU-scripted-0");
    assert_eq!(timeline.interval_nanos, 2_000_000);
    assert!(!timeline.truncated);

    let used = &timeline.figure(Figure::DeviceUsed(0)).unwrap().points;
    let mut expected = vec![Some(100 * MB)];
    for value in &values {
        expected.extend([Some(*value), Some(100 * MB)]);
    }
    let seen: Vec<_> = used.iter().map(|p| p.1).collect();
    assert_eq!(seen, expected, "each change once, in order");
    for (step, value) in values.iter().enumerate() {
        let span = run
            .spans
            .iter()
            .find(|s| s.role == Role::Step(step as i64))
            .unwrap();
        let at = used.iter().find(|p| p.1 == Some(*value)).unwrap().0;
        assert!(
            span.start_unix_nanos <= at + 1000 && at <= span.end_unix_nanos,
            "step {step}: the value was read at {at}, inside {}..{}",
            span.start_unix_nanos,
            span.end_unix_nanos
        );
        assert_eq!(span.gpu.unwrap().peak, *value as i64);
    }
    let totals = &timeline.figure(Figure::DeviceTotal(0)).unwrap().points;
    assert_eq!(
        totals.iter().map(|p| p.1).collect::<Vec<_>>(),
        vec![Some(80 << 30)]
    );
    let host = &timeline.figure(Figure::HostRss).unwrap().points;
    assert!(host.iter().all(|p| p.1.unwrap() > 0), "host memory is read");
}

#[test]
fn the_timeline_can_be_turned_off_and_on_for_otlp() {
    let runs = tempfile::tempdir().unwrap();
    let (source, script) = scripted(1, 100 * MB);
    let builder = gpuspan::Telemetry::builder()
        .run_dir(runs.path())
        .run_id("off")
        .summary(false)
        .timeline(false)
        .memory_source(source);
    let (telemetry, ()) = setup::run(builder, |_| script.wait_reads(2));
    telemetry.shutdown().unwrap();
    assert!(runs.path().join("off/traces.jsonl").is_file());
    assert!(!runs.path().join("off").join(TIMELINE_FILE).exists());

    let receiver = Receiver::start_http();
    let (source, script) = scripted(1, 100 * MB);
    let builder = setup::to_receiver(&receiver)
        .run_dir(runs.path())
        .run_id("otlp")
        .timeline(true)
        .memory_source(source)
        .sample_interval(Duration::from_millis(2));
    let (telemetry, ()) = setup::run(builder, |_| {
        script.set(0, 321 * MB);
        script.wait_reads(3);
    });
    telemetry.shutdown().unwrap();
    let timeline = read_timeline(&runs.path().join("otlp").join(TIMELINE_FILE)).unwrap();
    let used = &timeline.figure(Figure::DeviceUsed(0)).unwrap().points;
    assert_eq!(used.last().unwrap().1, Some(321 * MB));
    assert!(
        !runs.path().join("otlp/traces.jsonl").exists(),
        "spans went over OTLP"
    );
}

//! Leak detection on scripted epochs: end memory growing 1 % of 10 GiB per epoch puts one
//! `gpu.memory.leak_suspected` event (trend rule) on the epoch where the rule first holds,
//! with the exact growth, first and last figures, and counts it in the metric; a steady run
//! gets no event.

use gpuspan_test_support as support;

use std::time::Duration;

use support::receiver::{ReceivedSpan, Receiver};
use support::scripted::{scripted, Script};
use support::setup;

const GIB: u64 = 1 << 30;
/// 1 % of 10 GiB, to the byte.
const GROWTH: u64 = 107_374_182;

/// Runs `epochs` epochs of three steps; epoch `e` holds `used(e)` bytes throughout.
fn train(
    receiver: &Receiver,
    epochs: u64,
    used: impl Fn(u64) -> u64,
) -> (gpuspan::Telemetry, Script) {
    let (source, script) = scripted(1, used(0));
    let builder = setup::to_receiver(receiver)
        .memory_source(source)
        .sample_interval(Duration::from_millis(2))
        .metric_export_interval(Duration::from_secs(3600));
    let (telemetry, ()) = setup::run(builder, |_| {
        for epoch in 0..epochs {
            script.set(0, used(epoch));
            script.wait_reads(2);
            let _e = gpuspan::epoch_span!(epoch);
            for step in 0..3 {
                let _s = gpuspan::step_span!(step);
            }
        }
    });
    (telemetry, script)
}

fn epoch(receiver: &Receiver, index: i64) -> ReceivedSpan {
    receiver
        .spans_named("epoch")
        .into_iter()
        .find(|s| s.int_attr("ml.epoch") == Some(index))
        .unwrap_or_else(|| panic!("epoch {index} was not exported"))
}

#[test]
fn one_percent_per_epoch_is_flagged_by_the_trend_rule_within_ten_epochs() {
    let receiver = Receiver::start_grpc();
    let used = |epoch: u64| 10 * GIB + epoch * GROWTH;
    let (telemetry, _script) = train(&receiver, 12, used);
    telemetry.shutdown().unwrap();

    let flagged: Vec<(i64, usize)> = receiver
        .spans_named("epoch")
        .iter()
        .map(|s| {
            (
                s.int_attr("ml.epoch").unwrap(),
                s.events_named("gpu.memory.leak_suspected").len(),
            )
        })
        .filter(|(_, events)| *events > 0)
        .collect();
    // Epoch 0 is warm-up; from epoch 1 on, seven epochs make 6 % growth, past the 5 % the
    // trend rule asks for over its window. Each rule fires once.
    assert_eq!(flagged, vec![(7, 1)]);
    let span = epoch(&receiver, 7);
    let event = span.events_named("gpu.memory.leak_suspected")[0];
    assert_eq!(event.str_attr("gpu.memory.leak.rule"), Some("trend"));
    assert_eq!(
        event.int_attr("gpu.memory.leak.growth_per_epoch"),
        Some(GROWTH as i64)
    );
    assert_eq!(
        event.int_attr("gpu.memory.leak.first"),
        Some(used(1) as i64)
    );
    assert_eq!(event.int_attr("gpu.memory.leak.last"), Some(used(7) as i64));
    assert_eq!(event.int_attr("gpu.memory.leak.points"), Some(7));

    let points = receiver.points_named("gpu.memory.leak_suspected");
    let last = points.last().expect("the leak counter was exported");
    assert_eq!(last.str_attr("gpu.memory.leak.rule"), Some("trend"));
    assert_eq!(last.as_int(), Some(1));
}

#[test]
fn a_steady_run_with_two_percent_noise_gets_no_event() {
    let receiver = Receiver::start_http();
    // ±2 % around 10 GiB, from a fixed sequence.
    let noise = [
        3, -7, 10, -2, 8, -10, 1, 6, -5, 9, -8, 4, -1, 7, -9, 2, 5, -6, 0, -3,
    ];
    let used = |epoch: u64| {
        let percent = noise[epoch as usize % noise.len()] as f64 / 5.0;
        (10.0 * GIB as f64 * (1.0 + percent / 100.0)) as u64
    };
    let (telemetry, _script) = train(&receiver, 40, used);
    telemetry.shutdown().unwrap();

    let epochs = receiver.spans_named("epoch");
    assert_eq!(epochs.len(), 40);
    for span in &epochs {
        assert_eq!(span.events, vec![], "epoch {:?}", span.int_attr("ml.epoch"));
    }
}

#[test]
fn the_report_marks_the_flagged_epoch() {
    let runs = tempfile::tempdir().unwrap();
    let used = |epoch: u64| 10 * GIB + epoch * GROWTH;
    let (source, script) = scripted(1, used(0));
    let builder = gpuspan::Telemetry::builder()
        .run_dir(runs.path())
        .run_id("leak")
        .summary(false)
        .nvml_lib("/nonexistent/libnvidia-ml.so.1")
        .memory_source(source)
        .sample_interval(Duration::from_millis(2));
    let (telemetry, ()) = setup::run(builder, |_| {
        for epoch in 0..9 {
            script.set(0, used(epoch));
            script.wait_reads(2);
            let _e = gpuspan::epoch_span!(epoch);
        }
    });
    telemetry.shutdown().unwrap();

    let summary = gpuspan::runlog::read_run(&runs.path().join("leak")).unwrap();
    assert_eq!(summary.marks, vec![(7, "leak? trend".to_owned())]);
    let table = summary.render();
    let marked: Vec<&str> = table.lines().filter(|l| l.contains("<- ")).collect();
    assert_eq!(marked.len(), 1, "{table}");
    assert!(marked[0].trim_start().starts_with("7 "), "{table}");
    assert!(marked[0].ends_with("<- leak? trend"), "{table}");
}

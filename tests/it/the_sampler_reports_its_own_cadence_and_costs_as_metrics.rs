//! The sampler measures itself: `gpuspan.sampler.read.duration` (a histogram per kind of
//! driver call), `gpuspan.sampler.interval` (the time between readings, as achieved) and
//! `gpuspan.sampler.missed_ticks` reach the metrics output.

use gpuspan_test_support as support;

use std::time::Duration;

use support::fake_nvml::{FakeNvml, PROCESS_LIST};
use support::receiver::{MetricKind, PointValue, Receiver};
use support::sampling::{self, wait_for_ticks, MEMORY_INFO};
use support::setup;

#[test]
fn read_durations_intervals_and_missed_ticks_are_exported() {
    let fake = FakeNvml::build();
    fake.set_device_count(2);
    fake.set_latency(MEMORY_INFO, Duration::from_micros(12));
    fake.set_latency(PROCESS_LIST, Duration::from_micros(300));
    let receiver = Receiver::start_grpc();
    let builder = setup::to_receiver(&receiver)
        .nvml_lib(fake.path())
        .devices("0,1")
        .sample_interval(Duration::from_millis(3));
    let (telemetry, ()) = sampling::run(builder, |_| {
        let _step = gpuspan::step_span!(0);
        // Past the first utilization read's 100 ms.
        wait_for_ticks(&fake, 2, 40);
    });
    let stats = telemetry.sampler_stats().expect("enabled");
    telemetry.shutdown().expect("clean shutdown");

    let reads = receiver.points_named("gpuspan.sampler.read.duration");
    let count = |call: &str| -> u64 {
        reads
            .iter()
            .filter(|p| p.str_attr("gpuspan.sampler.call") == Some(call))
            .map(|p| match &p.value {
                PointValue::Histogram { count, .. } => *count,
                other => panic!("not a histogram: {other:?}"),
            })
            .max()
            .unwrap_or(0)
    };
    assert!(reads
        .iter()
        .all(|p| p.kind == MetricKind::Histogram && p.unit == "s"));
    // One per memory round once the meters exist: the 40 the test waited for at least.
    assert!(count("memory") >= 40, "{reads:?}");
    assert!(count("processes") >= 1, "{reads:?}");
    assert!(count("utilization") >= 1, "{reads:?}");

    let intervals = receiver.points_named("gpuspan.sampler.interval");
    let last = intervals.last().expect("gpuspan.sampler.interval");
    match &last.value {
        PointValue::Histogram { count, .. } => assert!(*count >= 40, "{count}"),
        other => panic!("not a histogram: {other:?}"),
    }
    let missed = receiver.points_named("gpuspan.sampler.missed_ticks");
    let missed = missed.last().expect("gpuspan.sampler.missed_ticks");
    assert_eq!(missed.kind, MetricKind::Sum { monotonic: true });
    // Collected at shutdown, after the figures above were read: never fewer.
    assert!(missed.as_int().expect("an integer sum") >= stats.missed_ticks as i64);
}

//! Counters a framework's caching allocator pushes (`gpuspan::record_allocator`) land on the
//! spans open at the time as `gpu.allocator.allocated.peak` / `.reserved.peak`, including a
//! value pushed and replaced between two sampler readings.

use gpuspan_test_support as support;

use std::time::Duration;

use support::receiver::Receiver;
use support::setup;

const MB: u64 = 1 << 20;

#[test]
fn the_highest_pushed_values_are_the_span_peaks() {
    let receiver = Receiver::start_grpc();
    // A long interval: the pushes below all fall between two readings.
    let builder = setup::to_receiver(&receiver)
        .nvml_lib("/nonexistent/libnvidia-ml.so.1")
        .sample_interval(Duration::from_secs(5));
    let (telemetry, ()) = setup::run(builder, |_| {
        gpuspan::record_allocator(300 * MB, 400 * MB);
        {
            let _quiet = gpuspan::step_span!(0);
        }
        let _e = gpuspan::epoch_span!(0);
        {
            let _s = gpuspan::step_span!(1);
            gpuspan::record_allocator(900 * MB, 1000 * MB);
            gpuspan::record_allocator(350 * MB, 1000 * MB);
        }
        let _s = gpuspan::step_span!(2);
        gpuspan::record_allocator(500 * MB, 1200 * MB);
    });
    telemetry.shutdown().unwrap();

    let step = |n: i64| {
        receiver
            .spans_named("step")
            .into_iter()
            .find(|s| s.int_attr("ml.step") == Some(n))
            .unwrap()
    };
    let peaks = |span: &support::receiver::ReceivedSpan| {
        (
            span.int_attr("gpu.allocator.allocated.peak")
                .map(|v| v as u64),
            span.int_attr("gpu.allocator.reserved.peak")
                .map(|v| v as u64),
        )
    };
    // Nothing pushed while it was open: the values standing when it opened.
    assert_eq!(peaks(&step(0)), (Some(300 * MB), Some(400 * MB)));
    // A value replaced before any sampler reading is still the peak.
    assert_eq!(peaks(&step(1)), (Some(900 * MB), Some(1000 * MB)));
    assert_eq!(peaks(&step(2)), (Some(500 * MB), Some(1200 * MB)));
    let epoch = &receiver.spans_named("epoch")[0];
    assert_eq!(peaks(epoch), (Some(900 * MB), Some(1200 * MB)));
    // Framework counters are not device memory: no gpu.memory.* without a GPU source.
    assert_eq!(epoch.int_attr("gpu.memory.peak"), None);
}

#[test]
fn without_pushes_there_is_no_allocator_attribute() {
    let receiver = Receiver::start_http();
    let (telemetry, ()) = setup::run(setup::to_receiver(&receiver), |_| {
        let _s = gpuspan::step_span!(0);
    });
    telemetry.shutdown().unwrap();
    let step = &receiver.spans_named("step")[0];
    assert_eq!(step.int_attr("gpu.allocator.allocated.peak"), None);
    assert_eq!(step.int_attr("gpu.allocator.reserved.peak"), None);
}

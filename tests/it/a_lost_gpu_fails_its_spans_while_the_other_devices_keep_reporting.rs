//! A device that NVML reports lost (`NVML_ERROR_GPU_IS_LOST`) in the middle of a run gives
//! the spans open meanwhile an error status naming it, while the other devices keep their
//! per-device attributes and metric series, and nothing panics.

use gpuspan_test_support as support;

use std::time::Duration;

use support::fake_nvml::{code, uuid_of, FakeNvml, MIB};
use support::receiver::{Receiver, StatusCode};
use support::sampling::{
    self, latest_device_ids, latest_device_point, per_device_indexes, triple, wait_for_ticks,
    MEMORY_INFO,
};
use support::setup;

const GIB: u64 = 1024 * MIB;

#[test]
fn a_gpu_lost_mid_run_fails_open_spans_and_spares_the_others() {
    let used = [GIB + 1, 2 * GIB + 2, 3 * GIB + 3];
    let later = GIB + 512 * MIB;
    let fake = FakeNvml::build();
    fake.set_device_count(3);
    for (dev, &bytes) in (0u32..).zip(&used) {
        fake.set_memory(dev, bytes, 80 * GIB);
        fake.set_utilization(dev, 50, 0);
    }

    let receiver = Receiver::start_grpc();
    let builder = setup::to_receiver(&receiver)
        .nvml_lib(fake.path())
        .devices("0,1,2")
        .sample_interval(Duration::from_millis(2));
    let (telemetry, samples_after_loss) = sampling::run(builder, |telemetry| {
        {
            let _healthy = gpuspan::memory_span!("healthy");
            wait_for_ticks(&fake, 3, 2);
        }
        telemetry.flush().expect("collection with every device");

        let across = gpuspan::epoch_span!(0);
        wait_for_ticks(&fake, 3, 2);
        fake.set_error(MEMORY_INFO, Some(1), code::GPU_IS_LOST);
        wait_for_ticks(&fake, 3, 2);
        let lost_at = telemetry.sampler_stats().unwrap().samples;
        {
            let _after = gpuspan::step_span!(0);
            // Device 0 keeps changing, and is still followed.
            fake.set_memory(0, later, 80 * GIB);
            wait_for_ticks(&fake, 3, 2);
        }
        drop(across);
        telemetry.flush().expect("collection after the loss");
        telemetry.sampler_stats().unwrap().samples - lost_at
    });
    telemetry.shutdown().expect("clean shutdown");
    assert!(samples_after_loss >= 2, "the sampler kept going");

    // Before the loss: no error, every device.
    let healthy = &receiver.spans_named("healthy")[0];
    assert_eq!(
        healthy.status_code,
        StatusCode::Unset,
        "{}",
        healthy.status_message
    );
    assert_eq!(per_device_indexes(healthy), [0, 1, 2].into());

    // Open across the loss, and opened after it: an error naming device 1, only.
    let across = &receiver.spans_named("epoch")[0];
    let after = &receiver.spans_named("step")[0];
    for span in [across, after] {
        assert_eq!(span.status_code, StatusCode::Error, "{}", span.name);
        let message = &span.status_message;
        assert!(message.contains("gpu 1"), "names the device: {message}");
        assert!(
            message.to_lowercase().contains("lost"),
            "says why: {message}"
        );
        assert!(
            !message.contains("gpu 0") && !message.contains("gpu 2"),
            "names only the lost device: {message}"
        );
        // The other devices still have their own figures; the lost one has no end.
        assert_eq!(triple(span, "gpu.1.memory"), None, "{}", span.name);
        assert_eq!(span.int_attr("gpu.1.memory.end"), None, "{}", span.name);
        assert_eq!(
            triple(span, "gpu.2.memory"),
            Some((used[2], used[2], used[2])),
            "{}",
            span.name
        );
        assert_eq!(span.str_attr("gpu.memory.source"), Some("nvml"));
    }
    assert_eq!(
        triple(across, "gpu.0.memory"),
        Some((used[0], later, later))
    );
    assert_eq!(triple(after, "gpu.0.memory"), Some((used[0], later, later)));
    // Open across the loss: what device 1 held before it fell off is still reported.
    assert_eq!(per_device_indexes(across), [0, 1, 2].into());
    assert_eq!(across.int_attr("gpu.1.memory.start"), Some(used[1] as i64));
    assert_eq!(across.int_attr("gpu.1.memory.peak"), Some(used[1] as i64));
    // Opened after it: devices 0 and 2 only.
    assert_eq!(per_device_indexes(after), [0, 2].into());
    // Open across the loss, its start was summed over three devices and its end over two:
    // the sums are left out rather than reading as 2 GiB freed.
    for key in ["start", "end", "peak", "delta"] {
        let key = format!("gpu.memory.{key}");
        assert_eq!(across.int_attr(&key), None, "{key}");
    }
    assert_eq!(across.double_attr("gpu.memory.imbalance"), None);
    // Opened after it, start and end sum the same devices (0 and 2), and the error status
    // says which one is missing.
    let sum_before = used[0] + used[2];
    let sum_after = later + used[2];
    assert_eq!(
        triple(after, "gpu.memory"),
        Some((sum_before, sum_after, sum_after))
    );

    // Metric series: the first collection has all three devices, the last one only the
    // devices that can still be read, with their current values.
    let usage = receiver.points_named("hw.gpu.memory.usage");
    assert!(
        usage
            .iter()
            .any(|p| p.str_attr("hw.id") == Some(&uuid_of(1))),
        "device 1 reported before it was lost"
    );
    for name in [
        "hw.gpu.memory.usage",
        "hw.gpu.memory.utilization",
        "hw.gpu.utilization",
    ] {
        let ids = latest_device_ids(&receiver.points_named(name));
        assert_eq!(ids, [uuid_of(0), uuid_of(2)].into(), "{name}");
    }
    let latest = latest_device_point(&usage, &uuid_of(0)).unwrap();
    assert_eq!(latest.as_int(), Some(later as i64));
    let peaks = receiver.points_named("gpu.memory.peak");
    let peak = latest_device_point(&peaks, &uuid_of(0)).expect("device 0 peak");
    assert_eq!(peak.as_int(), Some(later as i64));
    let peak = latest_device_point(&peaks, &uuid_of(2)).expect("device 2 peak");
    assert_eq!(peak.as_int(), Some(used[2] as i64));
}

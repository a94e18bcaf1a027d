//! With several devices read through NVML, every device gets its own metric series (with
//! the hardware semantic conventions' attributes), and spans carry the sums over the
//! devices, each device's own figures and the imbalance between them.

use gpuspan_test_support as support;

use std::time::Duration;

use support::fake_nvml::{uuid_of, FakeNvml, DEVICE_NAME, MIB};
use support::receiver::{MetricKind, Receiver};
use support::sampling::{self, device_points, latest_device_point, triple, wait_for_ticks};
use support::setup;

const GIB: u64 = 1024 * MIB;

#[test]
fn three_devices_report_per_device_points_sums_and_imbalance() {
    let used = [1000 * MIB, 3000 * MIB, 2000 * MIB];
    let total = [80 * GIB, 40 * GIB, 24 * GIB];
    let busy = [10u32, 55, 90];
    let names = [DEVICE_NAME, DEVICE_NAME, "NVIDIA L4 (fake)"];
    // Device 1 spikes between two metric collections, to an odd number of bytes.
    let spike = 5000 * MIB + 4321;

    let fake = FakeNvml::build();
    fake.set_device_count(3);
    for dev in 0..3 {
        fake.set_memory(dev as u32, used[dev], total[dev]);
        fake.set_utilization(dev as u32, busy[dev], 1);
    }
    fake.set_name(2, names[2]);

    let receiver = Receiver::start_grpc();
    let builder = setup::to_receiver(&receiver)
        .nvml_lib(fake.path())
        .devices("0,1,2")
        .sample_interval(Duration::from_millis(2));
    let (telemetry, ()) = sampling::run(builder, |telemetry| {
        assert_eq!(telemetry.memory_source(), Some("nvml"));
        let _step = gpuspan::step_span!(0);
        wait_for_ticks(&fake, 3, 2);
        telemetry.flush().expect("first metric collection");
        fake.set_memory(1, spike, total[1]);
        wait_for_ticks(&fake, 3, 2);
        fake.set_memory(1, used[1], total[1]);
        wait_for_ticks(&fake, 3, 2);
    });
    // Shutdown takes the second collection.
    telemetry.shutdown().expect("clean shutdown");

    // ---- metric points ----
    let usage = receiver.points_named("hw.gpu.memory.usage");
    let limit = receiver.points_named("hw.gpu.memory.limit");
    let memory_utilization = receiver.points_named("hw.gpu.memory.utilization");
    let utilization = receiver.points_named("hw.gpu.utilization");
    let peak = receiver.points_named("gpu.memory.peak");
    for dev in 0..3usize {
        let uuid = uuid_of(dev as u32);
        for (name, points) in [
            ("hw.gpu.memory.usage", &usage),
            ("hw.gpu.memory.limit", &limit),
            ("hw.gpu.memory.utilization", &memory_utilization),
            ("hw.gpu.utilization", &utilization),
            ("gpu.memory.peak", &peak),
        ] {
            let point = latest_device_point(points, &uuid)
                .unwrap_or_else(|| panic!("{name}: no point for device {dev} ({uuid})"));
            assert_eq!(point.str_attr("hw.name"), Some(names[dev]), "{name} {dev}");
            assert_eq!(point.str_attr("hw.vendor"), Some("NVIDIA"), "{name} {dev}");
            assert_eq!(point.str_attr("hw.type"), Some("gpu"), "{name} {dev}");
            assert_eq!(
                point.int_attr("gpu.index"),
                Some(dev as i64),
                "{name} {dev}"
            );
        }

        let point = latest_device_point(&usage, &uuid).unwrap();
        assert_eq!(point.as_int(), Some(used[dev] as i64), "usage of {dev}");
        assert_eq!(point.unit, "By");
        assert!(matches!(point.kind, MetricKind::Sum { monotonic: false }));

        let point = latest_device_point(&limit, &uuid).unwrap();
        assert_eq!(point.as_int(), Some(total[dev] as i64), "limit of {dev}");
        assert_eq!(point.unit, "By");

        let point = latest_device_point(&memory_utilization, &uuid).unwrap();
        let expected = used[dev] as f64 / total[dev] as f64;
        let got = point.as_double().expect("a fraction");
        assert!((got - expected).abs() < 1e-12, "{dev}: {got} != {expected}");
        assert_eq!(point.unit, "1");

        let point = latest_device_point(&utilization, &uuid).unwrap();
        let got = point.as_double().expect("a fraction");
        let expected = f64::from(busy[dev]) / 100.0;
        assert!((got - expected).abs() < 1e-12, "{dev}: {got} != {expected}");
        assert_eq!(point.str_attr("hw.gpu.task"), Some("general"));

        // The first collection saw the device at rest; the second, the peak since the
        // first, which for device 1 is the spike the usage gauge never shows.
        let peaks = device_points(&peak, &uuid);
        assert!(
            peaks.len() >= 2,
            "{dev}: one point per collection: {peaks:?}"
        );
        assert_eq!(
            peaks[0].as_int(),
            Some(used[dev] as i64),
            "first window of {dev}"
        );
        let expected = if dev == 1 { spike } else { used[dev] };
        assert_eq!(
            peaks.last().unwrap().as_int(),
            Some(expected as i64),
            "peak of {dev}"
        );
        assert_eq!(peaks[0].unit, "By");
    }
    assert!(
        usage.iter().all(|p| p.as_int() != Some(spike as i64)),
        "the usage gauge samples at collection time and misses the spike"
    );

    // ---- span attributes ----
    let steps = receiver.spans_named("step");
    assert_eq!(steps.len(), 1);
    let step = &steps[0];
    let sum: u64 = used.iter().sum();
    assert_eq!(
        triple(step, "gpu.memory"),
        Some((sum, sum, sum - used[1] + spike))
    );
    assert_eq!(step.int_attr("gpu.memory.delta"), Some(0));
    for (dev, &own) in used.iter().enumerate() {
        let peak = if dev == 1 { spike } else { own };
        assert_eq!(
            triple(step, &format!("gpu.{dev}.memory")),
            Some((own, own, peak)),
            "per-device figures of {dev}"
        );
    }
    let imbalance = step.double_attr("gpu.memory.imbalance").expect("imbalance");
    let expected = (spike - used[0]) as f64 / spike as f64;
    assert!(
        (imbalance - expected).abs() < 1e-12,
        "{imbalance} != {expected}"
    );
    assert_eq!(step.str_attr("gpu.memory.source"), Some("nvml"));
    assert!(step.int_attr("gpu.memory.samples").unwrap() >= 6);
}

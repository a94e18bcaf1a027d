//! `Builder::devices` narrows the NVML devices gpuspan reads, by index, by full `GPU-...`
//! UUID and by UUID prefix: sums, per-device attributes and metric series cover only
//! those, and with one device in scope there are no per-device attributes at all.

use gpuspan_test_support as support;

use std::collections::BTreeSet;

use support::fake_nvml::{uuid_of, FakeNvml, MIB};
use support::receiver::{ReceivedSpan, Receiver};
use support::sampling::{self, latest_device_ids, per_device_indexes, triple, wait_for_ticks};
use support::setup;

/// What each device of the fake uses: device `i` holds `(i + 1)` GiB and a few bytes, so
/// every subset has its own sum.
fn used(dev: u32) -> u64 {
    u64::from(dev + 1) * 1024 * MIB + u64::from(dev)
}

/// The step span and the `hw.id`s of the latest `hw.gpu.memory.usage` collection, with
/// `devices` as the scope on a fake with `count` devices, `in_scope` of them expected.
fn run_with_scope(count: u32, devices: &str, in_scope: u64) -> (ReceivedSpan, BTreeSet<String>) {
    let fake = FakeNvml::build();
    fake.set_device_count(count);
    for dev in 0..count {
        fake.set_memory(dev, used(dev), 80 * 1024 * MIB);
    }
    let receiver = Receiver::start_grpc();
    let builder = setup::on_fake_nvml(&receiver, fake.path()).devices(devices);
    let (telemetry, ()) = sampling::run(builder, |telemetry| {
        assert_eq!(telemetry.memory_source(), Some("nvml"));
        let _step = gpuspan::step_span!(0);
        wait_for_ticks(&fake, in_scope, 2);
    });
    telemetry.shutdown().expect("clean shutdown");
    let steps = receiver.spans_named("step");
    assert_eq!(steps.len(), 1);
    let ids = latest_device_ids(&receiver.points_named("hw.gpu.memory.usage"));
    (steps.into_iter().next().unwrap(), ids)
}

fn assert_covers(step: &ReceivedSpan, ids: &BTreeSet<String>, scope: &[u32]) {
    let sum: u64 = scope.iter().copied().map(used).sum();
    assert_eq!(
        triple(step, "gpu.memory"),
        Some((sum, sum, sum)),
        "sum over {scope:?}"
    );
    let expected_ids: BTreeSet<String> = scope.iter().copied().map(uuid_of).collect();
    assert_eq!(ids, &expected_ids, "metric series of {scope:?} only");
    if scope.len() > 1 {
        let indexes: BTreeSet<u32> = scope.iter().copied().collect();
        assert_eq!(per_device_indexes(step), indexes, "{:?}", step.attributes);
        for &dev in scope {
            let own = used(dev);
            assert_eq!(
                triple(step, &format!("gpu.{dev}.memory")),
                Some((own, own, own))
            );
        }
        assert!(step.double_attr("gpu.memory.imbalance").is_some());
    } else {
        assert!(
            per_device_indexes(step).is_empty(),
            "one device: no gpu.<i>.* attributes: {:?}",
            step.attributes
        );
        assert_eq!(step.double_attr("gpu.memory.imbalance"), None);
    }
}

#[test]
fn indexes_select_devices() {
    let (step, ids) = run_with_scope(3, "0,2", 2);
    assert_covers(&step, &ids, &[0, 2]);
}

#[test]
fn full_uuids_select_devices() {
    let (step, ids) = run_with_scope(3, &format!("{},{}", uuid_of(2), uuid_of(1)), 2);
    assert_covers(&step, &ids, &[1, 2]);
}

#[test]
fn a_uuid_prefix_selects_the_devices_it_starts() {
    // Of eleven devices, only device 10 (…-000000000010) starts with this prefix.
    let prefix = &uuid_of(10)[..uuid_of(10).len() - 1];
    assert!(!uuid_of(1).starts_with(prefix));
    let (step, ids) = run_with_scope(11, &format!("{prefix}, 3"), 2);
    assert_covers(&step, &ids, &[3, 10]);
}

#[test]
fn one_device_in_scope_has_no_per_device_attributes() {
    let (step, ids) = run_with_scope(3, &uuid_of(1), 1);
    assert_covers(&step, &ids, &[1]);
}

#[test]
fn a_uuid_prefix_that_starts_several_devices_is_an_error_naming_each() {
    let fake = FakeNvml::build();
    fake.set_device_count(3);
    let receiver = Receiver::start_grpc();
    let built = setup::to_receiver(&receiver)
        .nvml_lib(fake.path())
        .devices("2, GPU-00000000-0000")
        .build();
    let Err(error) = built else {
        panic!("a prefix of three devices is refused")
    };
    let error = error.to_string();
    assert!(
        error.contains("devices") && error.contains("GPU-00000000-0000"),
        "names the setting and the entry: {error}"
    );
    for dev in 0..3 {
        assert!(
            error.contains(&uuid_of(dev)),
            "names {}: {error}",
            uuid_of(dev)
        );
    }
}

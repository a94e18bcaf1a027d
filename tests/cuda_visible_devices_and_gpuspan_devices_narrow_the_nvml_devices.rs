// A test binary of its own: it sets variables every build in the process reads.
//! `CUDA_VISIBLE_DEVICES` (which NVML itself ignores) and `GPUSPAN_DEVICES` narrow the NVML
//! devices gpuspan reads, by index and by `GPU-...` UUID; `GPUSPAN_DEVICES` beats
//! `CUDA_VISIBLE_DEVICES`, and code beats both.
//!
//! The environment is process-wide: every test here builds inside `temp_env`, which
//! serialises them.

use gpuspan_test_support as support;

use std::collections::BTreeSet;
use std::time::Duration;

use gpuspan::Builder;
use support::fake_nvml::{uuid_of, FakeNvml, MIB};
use support::receiver::Receiver;
use support::sampling::{latest_device_ids, per_device_indexes, run_built, triple, wait_for_ticks};
use support::setup;

fn used(dev: u32) -> u64 {
    u64::from(dev + 1) * 1024 * MIB + u64::from(dev)
}

/// Runs one step on a fake with `count` devices, built with `vars` set (or removed, for
/// `None`), and checks that exactly the devices of `scope` were read and reported.
fn assert_scope(
    count: u32,
    vars: &[(&str, Option<&str>)],
    code: impl FnOnce(Builder) -> Builder,
    scope: &[u32],
) {
    let fake = FakeNvml::build();
    fake.set_device_count(count);
    for dev in 0..count {
        fake.set_memory(dev, used(dev), 80 * 1024 * MIB);
    }
    let receiver = Receiver::start_grpc();
    let builder = code(
        setup::to_receiver(&receiver)
            .nvml_lib(fake.path())
            .sample_interval(Duration::from_millis(2)),
    );
    let mut all = vec![("GPUSPAN_DEVICES", None), ("CUDA_VISIBLE_DEVICES", None)];
    all.retain(|(name, _)| !vars.iter().any(|(set, _)| set == name));
    all.extend_from_slice(vars);
    let telemetry = temp_env::with_vars(all, || builder.build()).expect("gpuspan builds");

    let (telemetry, ()) = run_built(telemetry, |_| {
        let _step = gpuspan::step_span!(0);
        wait_for_ticks(&fake, scope.len() as u64, 2);
    });
    telemetry.shutdown().expect("clean shutdown");

    let steps = receiver.spans_named("step");
    assert_eq!(steps.len(), 1);
    let step = &steps[0];
    let sum: u64 = scope.iter().copied().map(used).sum();
    assert_eq!(
        triple(step, "gpu.memory"),
        Some((sum, sum, sum)),
        "sum over {scope:?}"
    );
    let ids = latest_device_ids(&receiver.points_named("hw.gpu.memory.usage"));
    let expected: BTreeSet<String> = scope.iter().copied().map(uuid_of).collect();
    assert_eq!(ids, expected, "metric series of {scope:?} only");
    let indexes = per_device_indexes(step);
    if scope.len() > 1 {
        assert_eq!(indexes, scope.iter().copied().collect::<BTreeSet<u32>>());
        for &dev in scope {
            let own = used(dev);
            assert_eq!(
                triple(step, &format!("gpu.{dev}.memory")),
                Some((own, own, own))
            );
        }
    } else {
        assert!(
            indexes.is_empty(),
            "one device: no gpu.<i>.*: {:?}",
            step.attributes
        );
    }
}

#[test]
fn cuda_visible_devices_indexes_select_devices() {
    assert_scope(3, &[("CUDA_VISIBLE_DEVICES", Some("2,0"))], |b| b, &[0, 2]);
}

#[test]
fn cuda_visible_devices_uuids_select_devices() {
    let list = format!("{},0", uuid_of(2));
    assert_scope(3, &[("CUDA_VISIBLE_DEVICES", Some(&list))], |b| b, &[0, 2]);
}

#[test]
fn a_cuda_visible_devices_uuid_prefix_selects_the_devices_it_starts() {
    // Of eleven devices, only device 10 (...-000000000010) starts with this prefix.
    let full = uuid_of(10);
    let prefix = &full[..full.len() - 1];
    assert_scope(11, &[("CUDA_VISIBLE_DEVICES", Some(prefix))], |b| b, &[10]);
}

#[test]
fn cuda_visible_devices_with_one_uuid_leaves_no_per_device_attributes() {
    assert_scope(
        3,
        &[("CUDA_VISIBLE_DEVICES", Some(&uuid_of(1)))],
        |b| b,
        &[1],
    );
}

#[test]
fn gpuspan_devices_beats_cuda_visible_devices() {
    assert_scope(
        3,
        &[
            ("CUDA_VISIBLE_DEVICES", Some("0,2")),
            ("GPUSPAN_DEVICES", Some(&uuid_of(1))),
        ],
        |b| b,
        &[1],
    );
    assert_scope(3, &[("GPUSPAN_DEVICES", Some("1,2"))], |b| b, &[1, 2]);
}

#[test]
fn code_beats_the_environment() {
    assert_scope(
        3,
        &[
            ("CUDA_VISIBLE_DEVICES", Some("1")),
            ("GPUSPAN_DEVICES", Some("1")),
        ],
        |b| b.devices("0,2"),
        &[0, 2],
    );
}

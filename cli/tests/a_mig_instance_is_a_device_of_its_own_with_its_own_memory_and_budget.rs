// A test binary of its own: it sets variables every build in the process reads.
//! A GPU in MIG mode: each MIG instance is a device of its own, read through its own NVML
//! handle, with its own memory, processes, budget and batch-size limit. The parent GPU's
//! figures (which count every instance again) are not read. `CUDA_VISIBLE_DEVICES` with a
//! `MIG-<uuid>` narrows to that one instance, as CUDA does.
//!
//! The environment is process-wide: every test here builds inside `temp_env`, which
//! serialises them.

use gpuspan_test_support as support;

use std::collections::BTreeSet;
use std::path::Path;
use std::time::Duration;

use gpuspan::{Builder, MemoryBudget, Telemetry};

use gpuspan::settings::Exporter;
use support::fake_nvml::{mig_uuid_of, uuid_of, FakeNvml, MIB};
use support::receiver::Receiver;
use support::sampling::{
    latest_device_ids, latest_device_point, run_built, triple, wait_for_lists, wait_for_ticks,
};
use support::setup;

const GIB: u64 = 1 << 30;
/// One instance: a 1g.18gb-like slice of 16 GiB.
const INSTANCE: u64 = 16 * GIB;
/// GPU 0's own figures, which count all its instances: never a span's.
const PARENT_USED: u64 = 60 * GIB;
const GPU1_USED: u64 = 5 * GIB;

fn instance_used(mig: u32) -> u64 {
    u64::from(2 + mig) * GIB
}

/// GPU 0 in MIG mode with three instances, GPU 1 a whole GPU.
fn fake() -> FakeNvml {
    let fake = FakeNvml::build();
    fake.set_device_count(2);
    fake.set_memory(0, PARENT_USED, 141 * GIB);
    fake.set_memory(1, GPU1_USED, 141 * GIB);
    fake.set_mig(0, 3, INSTANCE);
    for mig in 0..3 {
        fake.set_memory(fake.mig_slot(0, mig), instance_used(mig), INSTANCE);
    }
    fake
}

/// Builds `builder` against `fake` with `CUDA_VISIBLE_DEVICES` set to `visible` (unset:
/// `None`).
fn build(fake: &FakeNvml, visible: Option<&str>, builder: Builder) -> Telemetry {
    let builder = builder
        .nvml_lib(fake.path())
        .sample_interval(Duration::from_millis(2));
    temp_env::with_vars(
        [("GPUSPAN_DEVICES", None), ("CUDA_VISIBLE_DEVICES", visible)],
        || builder.build(),
    )
    .expect("gpuspan builds")
}

#[test]
fn every_instance_of_a_gpu_in_mig_mode_gets_its_own_figures_and_the_parent_none() {
    let fake = fake();
    let receiver = Receiver::start_grpc();
    let telemetry = build(&fake, None, setup::to_receiver(&receiver));
    assert_eq!(
        telemetry.devices().len(),
        4,
        "three instances and GPU 1: {:?}",
        telemetry.devices()
    );
    let spiking = fake.mig_slot(0, 1);
    let (telemetry, ()) = run_built(telemetry, |_| {
        wait_for_ticks(&fake, 4, 2);
        let _step = gpuspan::step_span!(0);
        wait_for_ticks(&fake, 4, 2);
        fake.set_memory(spiking, 12 * GIB, INSTANCE);
        wait_for_ticks(&fake, 4, 2);
        fake.set_memory(spiking, instance_used(1), INSTANCE);
        wait_for_ticks(&fake, 4, 2);
    });
    telemetry.shutdown().expect("clean shutdown");

    let step = &receiver.spans_named("step")[0];
    let steady = (0..3).map(instance_used).sum::<u64>() + GPU1_USED;
    assert_eq!(
        triple(step, "gpu.memory"),
        Some((steady, steady, steady - instance_used(1) + 12 * GIB)),
        "the sum over the instances and GPU 1, without the parent's {PARENT_USED}"
    );
    for mig in [0, 2] {
        let own = instance_used(mig);
        assert_eq!(
            triple(step, &format!("gpu.0.mig{mig}.memory")),
            Some((own, own, own))
        );
    }
    assert_eq!(
        triple(step, "gpu.0.mig1.memory"),
        Some((instance_used(1), instance_used(1), 12 * GIB))
    );
    assert_eq!(
        triple(step, "gpu.1.memory"),
        Some((GPU1_USED, GPU1_USED, GPU1_USED))
    );
    assert_eq!(
        step.int_attr("gpu.0.memory.peak"),
        None,
        "no parent figures"
    );

    let usage = receiver.points_named("hw.gpu.memory.usage");
    let expected: BTreeSet<String> = (0..3)
        .map(|mig| mig_uuid_of(0, mig))
        .chain([uuid_of(1)])
        .collect();
    assert_eq!(latest_device_ids(&usage), expected);
    let instance = latest_device_point(&usage, &mig_uuid_of(0, 2)).expect("instance 2's gauge");
    assert_eq!(instance.int_attr("gpu.index"), Some(0));
    assert_eq!(instance.int_attr("gpu.mig.index"), Some(2));
    assert_eq!(instance.as_int(), Some(instance_used(2) as i64));
    assert_eq!(
        instance.str_attr("hw.name"),
        Some("NVIDIA H200 (fake) MIG 1g.18gb")
    );
    let whole = latest_device_point(&usage, &uuid_of(1)).expect("GPU 1's gauge");
    assert_eq!(whole.int_attr("gpu.index"), Some(1));
    assert_eq!(whole.int_attr("gpu.mig.index"), None);
    let limits = receiver.points_named("hw.gpu.memory.limit");
    let limit = latest_device_point(&limits, &mig_uuid_of(0, 0)).expect("instance 0's limit");
    assert_eq!(limit.as_int(), Some(INSTANCE as i64));
}

/// Steps at batch sizes 8, 16 and 40 on MIG instance 2 alone, each rising from 4 GiB by
/// 128 MiB a sample: 5, 6 and 9 GiB; a span over a budget fails. Exported to the receiver,
/// or with `run_dir`, only there.
fn steps_on_instance_two(
    budget: Option<MemoryBudget>,
    run_dir: Option<&Path>,
) -> (Receiver, Option<gpuspan::BatchFit>) {
    let fake = fake();
    let slot = fake.mig_slot(0, 2);
    let pid = std::process::id();
    fake.set_memory(slot, 4 * GIB, INSTANCE);
    // This process on instance 2, on instance 1 and on the parent: only instance 2's count.
    fake.set_processes(slot, &[(pid, 3 * GIB)]);
    fake.set_processes(fake.mig_slot(0, 1), &[(pid, GIB)]);
    fake.set_processes(0, &[(pid, 4 * GIB)]);
    let receiver = Receiver::start_grpc();
    let scope = mig_uuid_of(0, 2);
    let mut builder = setup::to_receiver(&receiver);
    if let Some(dir) = run_dir {
        builder = builder
            .run_dir(dir)
            .run_id("mig")
            .traces_exporter(Exporter::RunDir)
            .metrics_exporter(Exporter::None);
    }
    let builder = match budget {
        Some(budget) => builder.memory_budget(budget).memory_budget_error(true),
        None => builder,
    };
    let telemetry = build(&fake, Some(&scope), builder);
    let ids: Vec<String> = telemetry
        .devices()
        .iter()
        .map(|d| d.device.uuid.clone())
        .collect();
    assert_eq!(ids, vec![scope.clone()], "one device in scope");
    let (telemetry, fit) = run_built(telemetry, |telemetry| {
        wait_for_lists(telemetry, &fake, 1, 1);
        for (step, batch) in [8u64, 16, 40].into_iter().enumerate() {
            let _step = gpuspan::step_span!(step as u64, batch_size = batch as i64);
            wait_for_ticks(&fake, 1, 2);
            fake.set_memory(slot, 4 * GIB + batch * 128 * MIB, INSTANCE);
            wait_for_ticks(&fake, 1, 2);
            fake.set_memory(slot, 4 * GIB, INSTANCE);
            wait_for_ticks(&fake, 1, 2);
        }
        telemetry.batch_fit()
    });
    telemetry.shutdown().expect("clean shutdown");
    (receiver, fit)
}

#[test]
fn cuda_visible_devices_with_a_mig_uuid_reads_that_instance_and_its_processes_only() {
    let (receiver, _) = steps_on_instance_two(None, None);
    let steps = receiver.spans_named("step");
    assert_eq!(steps.len(), 3);
    let last = steps
        .iter()
        .find(|s| s.int_attr("ml.step") == Some(2))
        .expect("step 2");
    assert_eq!(
        triple(last, "gpu.memory"),
        Some((4 * GIB, 4 * GIB, 9 * GIB))
    );
    assert_eq!(
        triple(last, "gpu.process.memory"),
        Some((3 * GIB, 3 * GIB, 3 * GIB)),
        "this process's memory on instance 2, not on instance 1 or the parent"
    );
    assert!(
        !last.attributes.keys().any(|k| k.contains(".mig")),
        "one device: no per-device keys: {:?}",
        last.attributes
    );
    let usage = receiver.points_named("hw.gpu.memory.usage");
    assert_eq!(
        latest_device_ids(&usage),
        BTreeSet::from([mig_uuid_of(0, 2)])
    );
}

#[test]
fn a_budget_and_the_batch_size_fit_use_the_instances_memory_not_the_gpus() {
    // Half of the 16 GiB instance is 8 GiB (half of the 141 GiB GPU would be 70 GiB).
    let budget = Some(MemoryBudget::Fraction(0.5));
    let (receiver, fit) = steps_on_instance_two(budget, None);
    let over: Vec<i64> = receiver
        .spans_named("step")
        .iter()
        .filter(|s| !s.events_named("gpu.memory.budget_exceeded").is_empty())
        .filter_map(|s| s.int_attr("ml.step"))
        .collect();
    assert_eq!(over, vec![2], "only the 9 GiB step is over 8 GiB");
    let step = receiver
        .spans_named("step")
        .into_iter()
        .find(|s| s.int_attr("ml.step") == Some(2))
        .expect("step 2");
    let event = &step.events_named("gpu.memory.budget_exceeded")[0];
    assert_eq!(event.int_attr("gpu.index"), Some(0));
    assert_eq!(event.int_attr("gpu.mig.index"), Some(2));
    assert_eq!(event.int_attr("gpu.memory.budget"), Some((8 * GIB) as i64));
    assert_eq!(event.int_attr("gpu.memory.peak"), Some((9 * GIB) as i64));
    assert_eq!(
        step.status_message,
        "memory budget exceeded: peak 9.0 GiB over the budget of 8.0 GiB on gpu 0.mig2"
    );

    let fit = fit.expect("three batch sizes give a fit");
    assert_eq!(fit.fixed_bytes, (4 * GIB) as i64);
    assert_eq!(fit.per_sample_bytes, (128 * MIB) as i64);
    assert_eq!(fit.limit_bytes, Some((8 * GIB) as i64));
    assert_eq!(fit.max_batch_size, Some(32), "(8 GiB - 4 GiB) / 128 MiB");

    // The run directory keeps the instance's limits: the report draws the same fit.
    let dir = tempfile::tempdir().unwrap();
    let (_, again) = steps_on_instance_two(budget, Some(dir.path()));
    assert_eq!(again, Some(fit));
    let limits = std::fs::read_to_string(dir.path().join("mig/limits.json")).unwrap();
    assert!(limits.contains(r#""index":"0.mig2""#), "{limits}");
    let read = gpuspan_cli::report::Run::read(&dir.path().join("mig")).expect("a run directory");
    assert_eq!(read.fit, Some(fit));
}

#[test]
fn without_a_budget_the_batch_size_fit_is_made_to_the_instances_total() {
    let (_, fit) = steps_on_instance_two(None, None);
    let fit = fit.expect("three batch sizes give a fit");
    assert_eq!(fit.limit_bytes, Some(INSTANCE as i64));
    assert_eq!(fit.max_batch_size, Some(96), "(16 GiB - 4 GiB) / 128 MiB");
}

#[test]
fn a_gpu_in_mig_mode_with_no_instance_is_left_out_and_its_neighbour_kept() {
    let fake = fake();
    fake.set_mig(0, 0, INSTANCE);
    let receiver = Receiver::start_grpc();
    let telemetry = build(&fake, None, setup::to_receiver(&receiver));
    let ids: Vec<String> = telemetry
        .devices()
        .iter()
        .map(|d| d.device.uuid.clone())
        .collect();
    assert_eq!(ids, vec![uuid_of(1)], "CUDA cannot run on GPU 0 either");
    telemetry.shutdown().expect("clean shutdown");
}

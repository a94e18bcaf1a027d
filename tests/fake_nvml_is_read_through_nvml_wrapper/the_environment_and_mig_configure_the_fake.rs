//! What the environment configures once the fake is loaded, MIG instances included, each
//! instance with its own memory and processes.

use super::*;

#[test]
fn environment_variables_configure_the_fake() {
    let dir = tempfile::tempdir().unwrap();
    let timeline = dir.path().join("timeline.txt");
    std::fs::write(
        &timeline,
        "# at_ms device used_bytes\n0 1 4096\n\n3600000 1 8192\n",
    )
    .unwrap();

    let fake = FakeNvml::build();
    temp_env::with_vars(
        [
            ("FAKE_NVML_DEVICES", Some("3")),
            ("FAKE_NVML_TOTAL_MIB", Some("81559")),
            ("FAKE_NVML_USED_MIB", Some("2048")),
            ("FAKE_NVML_PROCESS_MIB", Some("512")),
            ("FAKE_NVML_TIMELINE", Some(timeline.to_str().unwrap())),
            (
                "FAKE_NVML_FAIL",
                Some("nvmlDeviceGetUtilizationRates:3,nvmlDeviceGetMemoryInfo:15:2"),
            ),
            ("FAKE_NVML_FOLLOW_RSS", None),
        ],
        || fake.load_env(),
    );
    let nvml = init(&fake);

    assert_eq!(nvml.device_count().unwrap(), 3);
    let d0 = nvml.device_by_index(0).unwrap();
    let m0 = d0.memory_info().unwrap();
    assert_eq!((m0.used, m0.total), (2048 * MIB, 81559 * MIB));
    // Device 1 follows the timeline file.
    assert_eq!(
        nvml.device_by_index(1).unwrap().memory_info().unwrap().used,
        4096
    );
    // Device 2 is lost for memory reads only.
    let d2 = nvml.device_by_index(2).unwrap();
    assert!(matches!(d2.memory_info(), Err(NvmlError::GpuLost)));
    assert_eq!(d2.uuid().unwrap(), uuid_of(2));
    assert!(matches!(
        d0.utilization_rates(),
        Err(NvmlError::NotSupported)
    ));

    let procs = d0.running_compute_processes().unwrap();
    assert_eq!(procs.len(), 1);
    assert_eq!(procs[0].pid, std::process::id());
    assert_eq!(procs[0].used_gpu_memory, UsedGpuMemory::Used(512 * MIB));
}

#[test]
fn environment_is_ignored_unless_loaded() {
    let fake = FakeNvml::build();
    let nvml = temp_env::with_var("FAKE_NVML_DEVICES", Some("5"), || init(&fake));
    assert_eq!(nvml.device_count().unwrap(), 1);
}

#[test]
fn a_gpu_in_mig_mode_lists_its_instances_each_with_its_own_memory_and_processes() {
    let fake = FakeNvml::build();
    fake.set_device_count(2);
    fake.set_mig(1, 3, 16 * GIB);
    fake.set_memory(fake.mig_slot(1, 2), 5 * GIB, 16 * GIB);
    fake.set_processes(fake.mig_slot(1, 2), &[(42, 3 * GIB)]);
    let nvml = init(&fake);

    let whole = nvml.device_by_index(0).unwrap();
    assert_eq!(whole.mig_mode().unwrap().current, 0);
    assert!(matches!(
        whole.mig_device_by_index(0),
        Err(NvmlError::NotSupported)
    ));

    let gpu = nvml.device_by_index(1).unwrap();
    assert_eq!(gpu.mig_mode().unwrap().current, 1);
    assert_eq!(gpu.mig_device_count().unwrap(), 7, "the most an H200 has");
    let instance = gpu.mig_device_by_index(2).unwrap();
    assert!(instance.mig_is_mig_device_handle().unwrap());
    assert_eq!(instance.uuid().unwrap(), mig_uuid_of(1, 2));
    assert_eq!(instance.name().unwrap(), "NVIDIA H200 (fake) MIG 1g.18gb");
    let memory = instance.memory_info().unwrap();
    assert_eq!((memory.used, memory.total), (5 * GIB, 16 * GIB));
    let processes = instance.running_compute_processes().unwrap();
    assert_eq!(processes.len(), 1);
    assert_eq!(processes[0].pid, 42);
    assert_eq!(processes[0].used_gpu_memory, UsedGpuMemory::Used(3 * GIB));
    assert_eq!(processes[0].gpu_instance_id, Some(2));
    assert!(matches!(
        instance.utilization_rates(),
        Err(NvmlError::NotSupported)
    ));
    assert_eq!(
        instance.mig_parent_device().unwrap().uuid().unwrap(),
        uuid_of(1)
    );
    // Instances 0 to 2 exist; 3 to 6 have none.
    assert!(gpu.mig_device_by_index(0).is_ok());
    assert!(matches!(
        gpu.mig_device_by_index(3),
        Err(NvmlError::NotFound)
    ));
    // The parent's own figures stay what they were set to.
    assert_eq!(gpu.memory_info().unwrap().used, DEFAULT_USED);
}

#[test]
fn fake_nvml_mig_configures_instances_from_the_environment() {
    let fake = FakeNvml::build();
    temp_env::with_vars(
        [
            ("FAKE_NVML_DEVICES", Some("1")),
            ("FAKE_NVML_MIG", Some("0:2:8192")),
        ],
        || fake.load_env(),
    );
    let nvml = init(&fake);
    let gpu = nvml.device_by_index(0).unwrap();
    assert_eq!(gpu.mig_mode().unwrap().current, 1);
    let instance = gpu.mig_device_by_index(1).unwrap();
    assert_eq!(instance.memory_info().unwrap().total, 8 * GIB);
    assert!(matches!(
        gpu.mig_device_by_index(2),
        Err(NvmlError::NotFound)
    ));
}

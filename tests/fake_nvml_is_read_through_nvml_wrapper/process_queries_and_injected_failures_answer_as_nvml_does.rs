//! Process queries through NVML's insufficient-size protocol, and failures injected where a
//! real driver has them: each fails only what it names, and the rest still reads.

use super::*;

#[test]
fn three_compute_processes_come_back_through_the_insufficient_size_protocol() {
    let fake = FakeNvml::build();
    fake.set_processes(0, &[(1001, GIB), (1002, 2 * GIB + 5), (1003, u64::MAX)]);
    let nvml = init(&fake);
    let device = nvml.device_by_index(0).unwrap();

    assert_eq!(device.running_compute_processes_count().unwrap(), 3);

    let procs = device.running_compute_processes().unwrap();
    assert_eq!(procs.len(), 3);
    assert_eq!(procs[0].pid, 1001);
    assert_eq!(procs[0].used_gpu_memory, UsedGpuMemory::Used(GIB));
    assert_eq!(procs[1].pid, 1002);
    assert_eq!(procs[1].used_gpu_memory, UsedGpuMemory::Used(2 * GIB + 5));
    assert_eq!(procs[2].pid, 1003);
    assert_eq!(procs[2].used_gpu_memory, UsedGpuMemory::Unavailable);
    assert_eq!(procs[0].gpu_instance_id, None);
    assert_eq!(procs[0].compute_instance_id, None);

    // One call for the count, then: one count query and one fill.
    assert_eq!(
        fake.call_count("nvmlDeviceGetComputeRunningProcesses_v3"),
        3
    );

    // No graphics processes by default; then one.
    assert!(device.running_graphics_processes().unwrap().is_empty());
    fake.set_graphics_processes(0, &[(4242, 300 * MIB)]);
    let gfx = device.running_graphics_processes().unwrap();
    assert_eq!(gfx.len(), 1);
    assert_eq!(gfx[0].pid, 4242);
    assert_eq!(gfx[0].used_gpu_memory, UsedGpuMemory::Used(300 * MIB));

    // Clearing the list gives an empty answer, not an error.
    fake.set_processes(0, &[]);
    assert!(device.running_compute_processes().unwrap().is_empty());
}

#[test]
fn not_supported_process_query_leaves_other_reads_working() {
    let fake = FakeNvml::build();
    fake.set_memory(0, 5 * GIB, 141 * GIB);
    fake.set_processes(0, &[(77, GIB)]);
    fake.set_error(
        "nvmlDeviceGetComputeRunningProcesses_v3",
        None,
        code::NOT_SUPPORTED,
    );
    let nvml = init(&fake);
    let device = nvml.device_by_index(0).unwrap();

    assert!(matches!(
        device.running_compute_processes(),
        Err(NvmlError::NotSupported)
    ));
    assert_eq!(device.memory_info().unwrap().used, 5 * GIB);

    fake.set_error(
        "nvmlDeviceGetComputeRunningProcesses_v3",
        None,
        code::SUCCESS,
    );
    let procs = device.running_compute_processes().unwrap();
    assert_eq!(procs.len(), 1);
    assert_eq!(procs[0].pid, 77);
}

#[test]
fn gpu_lost_on_device_one_while_device_zero_still_reads() {
    let fake = FakeNvml::build();
    fake.set_device_count(2);
    fake.set_memory(0, 3 * GIB, 141 * GIB);
    fake.set_memory(1, 4 * GIB, 141 * GIB);
    fake.set_error("nvmlDeviceGetMemoryInfo", Some(1), code::GPU_IS_LOST);
    let nvml = init(&fake);
    let d0 = nvml.device_by_index(0).unwrap();
    let d1 = nvml.device_by_index(1).unwrap();

    assert_eq!(d0.memory_info().unwrap().used, 3 * GIB);
    assert!(matches!(d1.memory_info(), Err(NvmlError::GpuLost)));
    // Only the injected function fails on device 1.
    assert_eq!(d1.uuid().unwrap(), uuid_of(1));

    // The exact versioned name works as well, and for a single device.
    fake.clear_errors();
    fake.set_error("nvmlDeviceGetMemoryInfo_v2", Some(0), code::GPU_IS_LOST);
    assert!(matches!(d0.memory_info(), Err(NvmlError::GpuLost)));
    assert_eq!(d1.memory_info().unwrap().used, 4 * GIB);

    fake.clear_errors();
    assert_eq!(d0.memory_info().unwrap().used, 3 * GIB);
    assert_eq!(d1.memory_info().unwrap().used, 4 * GIB);
    // Failed calls are counted too.
    assert_eq!(fake.call_count("nvmlDeviceGetMemoryInfo_v2"), 6);
}

#[test]
fn init_failure_is_injected_before_init() {
    let fake = FakeNvml::build();
    fake.set_error("nvmlInit_v2", None, code::DRIVER_NOT_LOADED);

    let err = Nvml::builder()
        .lib_path(fake.lib_path())
        .init()
        .expect_err("init fails as injected");
    assert!(matches!(err, NvmlError::DriverNotLoaded), "{err:?}");
    assert_eq!(fake.call_count("nvmlInit_v2"), 1);
    assert_eq!(fake.init_count(), 0);

    fake.clear_errors();
    let nvml = init(&fake);
    assert_eq!(nvml.device_count().unwrap(), 1);
    assert_eq!(fake.call_count("nvmlInit_v2"), 2);
    assert_eq!(fake.init_count(), 1);
}

#[test]
fn missing_process_symbols_fail_only_process_queries() {
    let fake = FakeNvml::build_variant(&[NO_PROCESS_QUERIES]);
    fake.set_memory(0, 6 * GIB, 141 * GIB);
    let nvml = init(&fake);
    let device = nvml.device_by_index(0).unwrap();

    match device.running_compute_processes() {
        Err(NvmlError::FailedToLoadSymbol(msg)) => {
            assert!(
                msg.contains("nvmlDeviceGetComputeRunningProcesses_v3"),
                "{msg}"
            )
        }
        other => panic!("expected FailedToLoadSymbol, got {other:?}"),
    }
    assert!(matches!(
        device.running_graphics_processes(),
        Err(NvmlError::FailedToLoadSymbol(_))
    ));
    let mem = device.memory_info().unwrap();
    assert_eq!(mem.used, 6 * GIB);
    assert_eq!(mem.total, 141 * GIB);
    assert_eq!(device.name().unwrap(), DEVICE_NAME);

    // The full build next to it still has them.
    let full = FakeNvml::build();
    full.set_processes(0, &[(5, MIB)]);
    let nvml_full = init(&full);
    let procs = nvml_full
        .device_by_index(0)
        .unwrap()
        .running_compute_processes()
        .unwrap();
    assert_eq!(procs.len(), 1);
    assert_eq!(procs[0].pid, 5);
}

#[test]
#[should_panic(expected = "does not implement a function named")]
fn misspelt_function_names_are_rejected() {
    let fake = FakeNvml::build();
    fake.set_error("nvmlDeviceGetMemoryInfo_v3", None, code::GPU_IS_LOST);
}

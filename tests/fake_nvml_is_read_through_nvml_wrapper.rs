// A test binary of its own: it sets variables that every fake driver in the process reads.
//! The fake `libnvidia-ml.so.1` in `tests/fake_nvml` answers the real
//! `nvml-wrapper` with exactly the state its control functions set.

use gpuspan_test_support as support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::Nvml;

use support::fake_nvml::{
    code, mig_uuid_of, reason, uuid_of, FakeNvml, DEFAULT_POWER_MW, DEFAULT_TOTAL, DEFAULT_USED,
    DEVICE_NAME, DRIVER_VERSION, ENERGY_BASE_MJ, ENERGY_QUANTUM, MIB, NO_PROCESS_QUERIES,
};

const GIB: u64 = 1024 * MIB;

fn init(fake: &FakeNvml) -> Nvml {
    Nvml::builder()
        .lib_path(fake.lib_path())
        .init()
        .expect("nvml-wrapper initialises on the fake library")
}

/// The `version` nvml-wrapper puts in `nvmlMemory_v2_t`:
/// `sizeof(nvmlMemory_v2_t) | 2 << 24`, with a 40-byte struct.
const MEMORY_V2_VERSION: u32 = 40 | (2 << 24);

#[test]
fn devices_have_names_uuids_indices_and_are_found_by_uuid() {
    let fake = FakeNvml::build();
    fake.set_device_count(2);
    let nvml = init(&fake);

    assert_eq!(fake.init_count(), 1);
    assert_eq!(fake.call_count("nvmlInit_v2"), 1);
    assert_eq!(nvml.sys_driver_version().unwrap(), DRIVER_VERSION);
    assert_eq!(nvml.device_count().unwrap(), 2);

    let d0 = nvml.device_by_index(0).unwrap();
    let d1 = nvml.device_by_index(1).unwrap();
    assert_eq!(d0.name().unwrap(), "NVIDIA H200 (fake)");
    assert_eq!(d1.name().unwrap(), DEVICE_NAME);
    assert_eq!(
        d0.uuid().unwrap(),
        "GPU-00000000-0000-0000-0000-000000000000"
    );
    assert_eq!(
        d1.uuid().unwrap(),
        "GPU-00000000-0000-0000-0000-000000000001"
    );
    assert_eq!(d1.uuid().unwrap(), uuid_of(1));
    assert_eq!(d0.index().unwrap(), 0);
    assert_eq!(d1.index().unwrap(), 1);

    let found = nvml
        .device_by_uuid("GPU-00000000-0000-0000-0000-000000000001")
        .unwrap();
    assert_eq!(found.index().unwrap(), 1);
    assert_eq!(found.uuid().unwrap(), uuid_of(1));
    assert!(matches!(
        nvml.device_by_uuid("GPU-00000000-0000-0000-0000-000000000007"),
        Err(NvmlError::NotFound)
    ));
    assert!(matches!(
        nvml.device_by_index(2),
        Err(NvmlError::InvalidArg)
    ));

    fake.set_name(1, "NVIDIA H100 80GB HBM3 (fake)");
    assert_eq!(d1.name().unwrap(), "NVIDIA H100 80GB HBM3 (fake)");
    assert_eq!(d0.name().unwrap(), DEVICE_NAME);

    assert_eq!(fake.call_count("nvmlDeviceGetHandleByUUID"), 2);
    assert_eq!(fake.call_count("nvmlDeviceGetHandleByIndex_v2"), 3);

    nvml.shutdown().unwrap();
    assert_eq!(fake.init_count(), 0);
    assert_eq!(fake.call_count("nvmlShutdown"), 1);
}

#[test]
fn dropping_nvml_shuts_the_fake_down() {
    let fake = FakeNvml::build();
    let a = init(&fake);
    let b = init(&fake);
    assert_eq!(fake.init_count(), 2);
    drop(a);
    assert_eq!(fake.init_count(), 1);
    drop(b);
    assert_eq!(fake.init_count(), 0);
    assert_eq!(fake.call_count("nvmlShutdown"), 2);
}

#[test]
fn defaults_are_one_h200_with_a_gib_used() {
    let fake = FakeNvml::build();
    let nvml = init(&fake);
    assert_eq!(nvml.device_count().unwrap(), 1);
    let mem = nvml.device_by_index(0).unwrap().memory_info().unwrap();
    assert_eq!(mem.total, 143_771 * MIB);
    assert_eq!(mem.total, DEFAULT_TOTAL);
    assert_eq!(mem.used, 1024 * MIB);
    assert_eq!(mem.used, DEFAULT_USED);
    assert_eq!(mem.free, DEFAULT_TOTAL - DEFAULT_USED);
}

#[test]
fn memory_info_reports_exactly_what_was_set() {
    let fake = FakeNvml::build();
    fake.set_device_count(2);
    fake.set_memory(0, 7 * GIB + 123, 141 * GIB);
    fake.set_memory(1, 99 * GIB + 1, 140 * GIB);
    let nvml = init(&fake);

    let m0 = nvml.device_by_index(0).unwrap().memory_info().unwrap();
    assert_eq!(m0.used, 7 * GIB + 123);
    assert_eq!(m0.total, 141 * GIB);
    assert_eq!(m0.free, 141 * GIB - (7 * GIB + 123));
    assert_eq!(m0.reserved, 0);
    assert_eq!(m0.version, MEMORY_V2_VERSION);

    let m1 = nvml.device_by_index(1).unwrap().memory_info().unwrap();
    assert_eq!(m1.used, 99 * GIB + 1);
    assert_eq!(m1.total, 140 * GIB);
    assert_eq!(m1.free, 41 * GIB - 1);

    // State changes show up on the next read, through the same handles.
    fake.set_memory(0, 100 * GIB, 141 * GIB);
    let m0 = nvml.device_by_index(0).unwrap().memory_info().unwrap();
    assert_eq!(m0.used, 100 * GIB);
    assert_eq!(m0.free, 41 * GIB);

    // nvml-wrapper 0.13 reads memory through the _v2 entry point only.
    assert_eq!(fake.call_count("nvmlDeviceGetMemoryInfo_v2"), 3);
    assert_eq!(fake.call_count("nvmlDeviceGetMemoryInfo"), 0);
}

#[test]
fn utilization_rates_are_what_was_set() {
    let fake = FakeNvml::build();
    fake.set_device_count(2);
    fake.set_utilization(0, 87, 42);
    fake.set_utilization(1, 3, 100);
    let nvml = init(&fake);

    let u0 = nvml
        .device_by_index(0)
        .unwrap()
        .utilization_rates()
        .unwrap();
    assert_eq!((u0.gpu, u0.memory), (87, 42));
    let u1 = nvml
        .device_by_index(1)
        .unwrap()
        .utilization_rates()
        .unwrap();
    assert_eq!((u1.gpu, u1.memory), (3, 100));
    assert_eq!(fake.call_count("nvmlDeviceGetUtilizationRates"), 2);
}

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
fn timeline_scripts_used_memory_over_time() {
    let fake = FakeNvml::build();
    fake.set_memory(0, 777, 141 * GIB);
    fake.set_timeline(
        0,
        &[(Duration::ZERO, 1000), (Duration::from_millis(50), 5000)],
    );
    let nvml = init(&fake);
    let device = nvml.device_by_index(0).unwrap();

    let started = Instant::now();
    fake.start_timeline();
    let first = device.memory_info().unwrap().used;
    if started.elapsed() < Duration::from_millis(50) {
        assert_eq!(first, 1000);
    } else {
        // Only on a machine too slow to read within 50 ms.
        assert_eq!(first, 5000);
    }

    thread::sleep(Duration::from_millis(80));
    let later = device.memory_info().unwrap();
    assert_eq!(later.used, 5000);
    assert_eq!(later.free, 141 * GIB - 5000);
    assert_eq!(fake.current_used(0), 5000);

    // Restarting the clock goes back to the first point.
    fake.start_timeline();
    let again = device.memory_info().unwrap().used;
    assert!(again == 1000 || again == 5000);

    // Clearing the timeline falls back to the set value.
    fake.set_timeline(0, &[]);
    assert_eq!(device.memory_info().unwrap().used, 777);
}

#[test]
fn timeline_before_its_first_point_reports_the_set_value() {
    let fake = FakeNvml::build();
    fake.set_memory(0, 2 * GIB, 141 * GIB);
    fake.set_timeline(0, &[(Duration::from_secs(3600), 9 * GIB)]);
    fake.start_timeline();
    let nvml = init(&fake);
    let device = nvml.device_by_index(0).unwrap();
    assert_eq!(device.memory_info().unwrap().used, 2 * GIB);
}

#[test]
fn two_instances_in_one_process_keep_separate_state() {
    let a = FakeNvml::build();
    let b = FakeNvml::build();
    assert_ne!(a.path(), b.path());
    assert_eq!(a.path().file_name().unwrap(), "libnvidia-ml.so.1");

    a.set_device_count(1);
    a.set_memory(0, 11 * GIB, 141 * GIB);
    b.set_device_count(3);
    b.set_memory(0, 22 * GIB, 80 * GIB);
    b.set_memory(2, 33 * GIB, 80 * GIB);

    let nvml_a = init(&a);
    let nvml_b = init(&b);

    assert_eq!(nvml_a.device_count().unwrap(), 1);
    assert_eq!(nvml_b.device_count().unwrap(), 3);
    let ma = nvml_a.device_by_index(0).unwrap().memory_info().unwrap();
    let mb = nvml_b.device_by_index(0).unwrap().memory_info().unwrap();
    assert_eq!((ma.used, ma.total), (11 * GIB, 141 * GIB));
    assert_eq!((mb.used, mb.total), (22 * GIB, 80 * GIB));
    let mb2 = nvml_b.device_by_index(2).unwrap().memory_info().unwrap();
    assert_eq!(mb2.used, 33 * GIB);

    assert_eq!(a.call_count("nvmlDeviceGetMemoryInfo_v2"), 1);
    assert_eq!(b.call_count("nvmlDeviceGetMemoryInfo_v2"), 2);

    a.set_error("nvmlDeviceGetMemoryInfo", None, code::GPU_IS_LOST);
    assert!(matches!(
        nvml_a.device_by_index(0).unwrap().memory_info(),
        Err(NvmlError::GpuLost)
    ));
    assert_eq!(
        nvml_b
            .device_by_index(0)
            .unwrap()
            .memory_info()
            .unwrap()
            .used,
        22 * GIB
    );
}

#[test]
fn a_reader_thread_sees_writes_from_the_test_thread() {
    let fake = FakeNvml::build();
    let nvml = Arc::new(init(&fake));
    let stop = Arc::new(AtomicBool::new(false));

    let reader = {
        let nvml = Arc::clone(&nvml);
        let stop = Arc::clone(&stop);
        thread::spawn(move || {
            let device = nvml.device_by_index(0).unwrap();
            let mut reads = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let mem = device.memory_info().unwrap();
                // Every read is one consistent state: used + free = total.
                assert_eq!(mem.used + mem.free, mem.total);
                reads += 1;
            }
            reads
        })
    };

    let reads_so_far = || fake.call_count("nvmlDeviceGetMemoryInfo_v2");
    let wait_for_reads = |at_least: u64| {
        let deadline = Instant::now() + Duration::from_secs(10);
        while reads_so_far() < at_least {
            assert!(Instant::now() < deadline, "the reader thread never read");
            thread::yield_now();
        }
    };
    // Writes overlap reads: the reader has read before and reads after.
    wait_for_reads(1);
    for i in 1..=2000u64 {
        fake.set_memory(0, i * MIB, 2 * i * MIB);
    }
    wait_for_reads(reads_so_far() + 1);
    stop.store(true, Ordering::Relaxed);
    let reads = reader.join().unwrap();

    assert!(reads >= 2);
    assert_eq!(fake.call_count("nvmlDeviceGetMemoryInfo_v2"), reads);
    let last = nvml.device_by_index(0).unwrap().memory_info().unwrap();
    assert_eq!((last.used, last.total), (2000 * MIB, 4000 * MIB));
}

#[test]
fn follow_rss_adds_the_readers_resident_set() {
    let fake = FakeNvml::build();
    fake.set_memory(0, MIB, 141 * GIB);
    fake.set_follow_rss(0, true);
    let nvml = init(&fake);
    let used = nvml.device_by_index(0).unwrap().memory_info().unwrap().used;
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let resident_pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    let page = u64::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap();
    let rss = resident_pages * page;
    // The test process is resident with more than a MiB; the two RSS reads
    // differ by what was allocated in between, not by much.
    assert!(used > 2 * MIB, "{used}");
    assert!(
        used.abs_diff(MIB + rss) < 64 * MIB,
        "{used} vs {}",
        MIB + rss
    );

    fake.set_follow_rss(0, false);
    assert_eq!(
        nvml.device_by_index(0).unwrap().memory_info().unwrap().used,
        MIB
    );
}

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
#[should_panic(expected = "does not implement a function named")]
fn misspelt_function_names_are_rejected() {
    let fake = FakeNvml::build();
    fake.set_error("nvmlDeviceGetMemoryInfo_v3", None, code::GPU_IS_LOST);
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

/// Waits until the power clock is `margin` past the start of a quantum, so that a few reads
/// fall inside one quantum.
fn just_after_a_quantum(fake: &FakeNvml, margin: Duration) {
    loop {
        let into = fake.power_clock().as_nanos() % ENERGY_QUANTUM.as_nanos();
        if into >= margin.as_nanos() && into < 2 * margin.as_nanos() {
            return;
        }
        thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn the_energy_counter_moves_in_quanta_along_the_scripted_power() {
    let fake = FakeNvml::build();
    let nvml = init(&fake);
    let device = nvml.device_by_index(0).unwrap();
    assert_eq!(device.power_usage().unwrap() as u64, DEFAULT_POWER_MW);
    let first = device.total_energy_consumption().unwrap();
    assert!(first >= ENERGY_BASE_MJ);
    assert_eq!(first, fake.current_energy(0));

    // 200 W from the next quantum on, 500 W from the one after: each whole quantum adds
    // its power times 100 ms, and nothing moves within a quantum.
    just_after_a_quantum(&fake, Duration::from_millis(10));
    let now = fake.power_clock();
    let quantum = ENERGY_QUANTUM.as_nanos() as u64;
    let next = (now.as_nanos() as u64 / quantum + 1) * quantum;
    fake.set_power_timeline(
        0,
        &[
            (Duration::from_nanos(next), 200_000),
            (Duration::from_nanos(next + quantum), 500_000),
        ],
    );
    let before = device.total_energy_consumption().unwrap();
    assert_eq!(device.total_energy_consumption().unwrap(), before);
    while fake.power_clock() < Duration::from_nanos(next + 2 * quantum) + Duration::from_millis(5) {
        thread::sleep(Duration::from_millis(2));
    }
    let after = device.total_energy_consumption().unwrap();
    assert_eq!(device.power_usage().unwrap(), 500_000);
    // The quantum the timeline was set in still drew 300 W until its end.
    let drawn = 30_000 + 20_000 + 50_000;
    let quanta_late = (fake.power_clock().as_nanos() as u64 - next) / quantum - 2;
    assert_eq!(after - before, drawn + quanta_late * 50_000);
    assert_eq!(fake.call_count("nvmlDeviceGetTotalEnergyConsumption"), 4);
}

#[test]
fn a_driver_reload_starts_the_counter_again_from_zero() {
    let fake = FakeNvml::build();
    let nvml = init(&fake);
    let device = nvml.device_by_index(0).unwrap();
    let before = device.total_energy_consumption().unwrap();
    fake.reload_driver();
    let after = device.total_energy_consumption().unwrap();
    assert!(after < before, "{after} after a reload, {before} before");
    assert_eq!(after, 0);
}

#[test]
fn clock_event_reasons_and_the_sm_clock_are_what_was_set() {
    let fake = FakeNvml::build();
    fake.set_device_count(2);
    let nvml = init(&fake);
    let (d0, d1) = (
        nvml.device_by_index(0).unwrap(),
        nvml.device_by_index(1).unwrap(),
    );
    assert_eq!(d0.current_throttle_reasons().unwrap().bits(), 0);
    fake.set_clocks_event_reasons(1, reason::SW_POWER_CAP | reason::HW_THERMAL_SLOWDOWN);
    fake.set_sm_clock(1, 1410);
    assert_eq!(
        d1.current_throttle_reasons().unwrap().bits(),
        reason::SW_POWER_CAP | reason::HW_THERMAL_SLOWDOWN
    );
    assert_eq!(
        d1.clock_info(nvml_wrapper::enum_wrappers::device::Clock::SM)
            .unwrap(),
        1410
    );
    assert_eq!(
        d0.clock_info(nvml_wrapper::enum_wrappers::device::Clock::SM)
            .unwrap(),
        1980
    );
    // The newer entry point answers the same.
    let sym = nvml
        .lib()
        .nvmlDeviceGetCurrentClocksEventReasons
        .as_ref()
        .expect("the fake exports nvmlDeviceGetCurrentClocksEventReasons");
    let mut bits = 0u64;
    // SAFETY: the handle is the fake's, valid while `nvml` lives.
    let rc = unsafe { sym(d1.handle(), &mut bits) };
    assert_eq!(rc, 0);
    assert_eq!(bits, reason::SW_POWER_CAP | reason::HW_THERMAL_SLOWDOWN);
}

#[test]
fn a_mig_instance_has_no_power_or_energy_of_its_own() {
    let fake = FakeNvml::build();
    fake.set_mig(0, 2, 16 * GIB);
    let nvml = init(&fake);
    let gpu = nvml.device_by_index(0).unwrap();
    let instance = gpu.mig_device_by_index(0).unwrap();
    assert!(matches!(
        instance.total_energy_consumption(),
        Err(NvmlError::NotSupported)
    ));
    assert!(matches!(
        instance.power_usage(),
        Err(NvmlError::NotSupported)
    ));
    assert!(gpu.total_energy_consumption().is_ok());
}

//! Devices, their memory and their utilization read back exactly as the control functions set
//! them, from a fake that starts as one H200 and shuts down when nvml-wrapper lets it go.

use super::*;

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

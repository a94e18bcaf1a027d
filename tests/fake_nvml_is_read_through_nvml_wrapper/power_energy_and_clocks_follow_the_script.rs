//! Power, energy and clocks drawn from the script: the energy counter moves in quanta along
//! the scripted power and starts again from zero on a driver reload, the clock event reasons
//! and SM clock are what was set, and a MIG instance has no power of its own.

use super::*;

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

//! The shared state's watermarks: reuse, and the power figures a span takes with it.

use super::*;

fn shared(devices: u32) -> Shared {
    let devices = (0..devices)
        .map(|index| Device {
            index,
            mig: None,
            uuid: format!("GPU-{index}"),
            name: "test".into(),
            vendor: "test".into(),
        })
        .collect();
    Shared::new("test".into(), devices, Duration::from_millis(5))
}

#[test]
fn steps_closed_between_two_ticks_reuse_one_watermark_and_leave_none_open() {
    let shared = shared(8);
    let epoch = shared.open_watermark().unwrap();
    let first = shared.open_watermark().unwrap();
    let _ = shared.finish_watermark(Arc::clone(&first));
    for _ in 0..1_000 {
        let step = shared.open_watermark().unwrap();
        assert!(
            Arc::ptr_eq(&step, &first),
            "a new watermark was made for a step"
        );
        assert!(shared.finish_watermark(step).0.is_none());
    }
    let watermarks = lock(&shared.watermarks);
    assert_eq!(watermarks.open.len(), 1, "only the epoch is open");
    assert!(Arc::ptr_eq(&watermarks.open[0], &epoch));
}

#[test]
fn a_span_s_power_figures_go_with_its_watermark_and_it_comes_back_cleared() {
    use figure::power as slot;
    let mut shared = shared(2);
    shared.read_power(super::super::power::Power::slots(2), None);
    let base = shared.power_base().unwrap();
    shared.latest[base + slot::POWER_NOW].store(Reading::some(250_000));
    let step = shared.open_watermark().unwrap();
    let mut moved = vec![Reading::some(0); super::super::power::Power::slots(2)];
    moved[slot::ENERGY] = Reading::some(7_000);
    moved[slot::DEVICE_ENERGY0] = Reading::some(3_000);
    moved[slot::DEVICE_ENERGY0 + 1] = Reading::some(4_000);
    moved[slot::POWER_NOW] = Reading::NONE;
    moved[slot::SM_CLOCK_LOW] = slot::upside_down(Some(1_400));
    for watermark in &lock(&shared.watermarks).open {
        watermark.add_power(&moved);
        watermark.add_power(&moved);
    }
    let power = shared.finish_watermark(Arc::clone(&step));
    let held = power.0.expect("the watermark goes with the span");
    let energy = held.energy().unwrap();
    assert_eq!(energy.counted_uj, Some(14_000));
    assert_eq!(energy.devices_uj, vec![Some(6_000), Some(8_000)]);
    assert_eq!(energy.lowest_sm_mhz, Some(1_400));
    assert!(!energy.reset);
    assert!(lock(&shared.watermarks).open.is_empty());
    shared.recycle_watermark(held);
    let next = shared.open_watermark().unwrap();
    assert!(Arc::ptr_eq(&next, &step), "the watermark was not reused");
    let energy = next.energy().unwrap();
    assert_eq!(energy.counted_uj, Some(0));
    assert_eq!(
        energy.power_now_mw,
        Some(250_000),
        "the power current at its start"
    );
    assert_eq!(energy.devices_uj, vec![Some(0), Some(0)]);
}

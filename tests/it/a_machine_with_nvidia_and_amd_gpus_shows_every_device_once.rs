//! On a machine with an NVIDIA GPU (read through NVML, here the fake library) and an AMD
//! GPU (read from the kernel's files, here a written tree), every device is there once,
//! with its own index and vendor, and the spans sum both; this process's memory is NVML's
//! list on the one and its fdinfo on the other.

use gpuspan_test_support as support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use gpuspan::Builder;
use support::fake_nvml::{FakeNvml, MIB};
use support::receiver::Receiver;
use support::sampling::{self, triple, wait_for_lists, wait_for_ticks};
use support::setup;

const PDEV: &str = "0000:83:00.0";

/// Writes an amdgpu card as DRM card `card` under `root/sys`; returns its device directory.
fn amd_card(root: &Path, card: u32) -> PathBuf {
    let device = root.join(format!("sys/class/drm/card{card}/device"));
    std::fs::create_dir_all(&device).unwrap();
    std::fs::write(
        device.join("uevent"),
        format!("DRIVER=amdgpu\nPCI_SLOT_NAME={PDEV}\n"),
    )
    .unwrap();
    device
}

/// A builder reading NVML through `fake` and the machine written under `root`, for the
/// devices `devices`.
fn builder(receiver: &Receiver, fake: &FakeNvml, root: &Path, devices: &str) -> Builder {
    setup::to_receiver(receiver)
        .nvml_lib(fake.path())
        .devices(devices)
        .sysfs_root(root.join("sys"))
        .procfs_root(root.join("proc"))
}

#[test]
fn nvidia_devices_stay_on_nvml_and_amd_devices_come_after_them() {
    let fake = FakeNvml::build();
    fake.set_memory(0, 3000 * MIB, 80 * 1024 * MIB);
    fake.set_processes(0, &[(std::process::id(), 700 * MIB)]);

    let root = tempfile::tempdir().unwrap();
    let device = amd_card(root.path(), 1);
    std::fs::write(device.join("unique_id"), "7b1d0e6f5a4c3b21\n").unwrap();
    std::fs::write(
        device.join("mem_info_vram_used"),
        format!("{}\n", 2000 * MIB),
    )
    .unwrap();
    std::fs::write(device.join("mem_info_vram_total"), "68702699520\n").unwrap();
    // The NVIDIA GPU's own DRM card is passed over: NVML reads it.
    let nvidia = root.path().join("sys/class/drm/card0/device");
    std::fs::create_dir_all(&nvidia).unwrap();
    std::fs::write(
        nvidia.join("uevent"),
        "DRIVER=nvidia\nPCI_SLOT_NAME=0000:03:00.0\n",
    )
    .unwrap();
    let fdinfo = root
        .path()
        .join(format!("proc/{}/fdinfo", std::process::id()));
    std::fs::create_dir_all(&fdinfo).unwrap();
    std::fs::write(
        fdinfo.join("5"),
        format!("drm-driver:\tamdgpu\ndrm-pdev:\t{PDEV}\ndrm-client-id:\t3\ndrm-resident-vram:\t300 MiB\n"),
    )
    .unwrap();

    let receiver = Receiver::start_grpc();
    let builder =
        builder(&receiver, &fake, root.path(), "0,1").sample_interval(Duration::from_millis(2));
    let (telemetry, ()) = sampling::run(builder, |telemetry| {
        assert_eq!(telemetry.memory_source(), Some("nvml+amdgpu-sysfs"));
        let devices = telemetry.devices();
        let seen: Vec<_> = devices
            .iter()
            .map(|d| {
                (
                    d.device.index,
                    d.device.vendor.as_str(),
                    d.device.uuid.as_str(),
                )
            })
            .collect();
        assert_eq!(seen.len(), 2, "{seen:?}");
        assert_eq!((seen[0].0, seen[0].1), (0, "NVIDIA"));
        assert_eq!(seen[1], (1, "AMD", "GPU-7b1d0e6f5a4c3b21"));
        let _step = gpuspan::step_span!(0);
        wait_for_lists(telemetry, &fake, 1, 2);
        wait_for_ticks(&fake, 1, 2);
    });
    telemetry.shutdown().expect("clean shutdown");

    let step = &receiver.spans_named("step")[0];
    assert_eq!(
        step.str_attr("gpu.memory.source"),
        Some("nvml+amdgpu-sysfs")
    );
    assert_eq!(
        triple(step, "gpu.memory"),
        Some((5000 * MIB, 5000 * MIB, 5000 * MIB))
    );
    assert_eq!(triple(step, "gpu.0.memory").map(|t| t.2), Some(3000 * MIB));
    assert_eq!(triple(step, "gpu.1.memory").map(|t| t.2), Some(2000 * MIB));
    assert_eq!(
        triple(step, "gpu.process.memory").map(|t| t.2),
        Some(1000 * MIB),
        "NVML's list on the NVIDIA GPU and fdinfo on the AMD one"
    );
}

#[test]
fn the_spans_carry_the_energy_both_gpus_drew() {
    let fake = FakeNvml::build();
    fake.set_power(0, 200_000);
    let root = tempfile::tempdir().unwrap();
    let device = amd_card(root.path(), 1);
    let hwmon = device.join("hwmon/hwmon2");
    std::fs::create_dir_all(&hwmon).unwrap();
    std::fs::write(device.join("mem_info_vram_used"), "4096\n").unwrap();
    // 100 W: amdgpu gives the power only, so the sum is estimated from the powers.
    std::fs::write(hwmon.join("power1_average"), "100000000\n").unwrap();

    let receiver = Receiver::start_grpc();
    let builder =
        builder(&receiver, &fake, root.path(), "0,1").sample_interval(Duration::from_millis(2));
    let (telemetry, ()) = sampling::run(builder, |_| {
        wait_for_ticks(&fake, 1, 30);
        let _step = gpuspan::step_span!(0);
        std::thread::sleep(Duration::from_millis(300));
    });
    telemetry.shutdown().expect("clean shutdown");

    let step = &receiver.spans_named("step")[0];
    let energy = step
        .double_attr("gpu.energy")
        .expect("energy from both sources");
    assert_eq!(step.bool_attr("gpu.energy.estimated"), Some(true));
    let seconds = (step.end_time_unix_nano - step.start_time_unix_nano) as f64 / 1e9;
    let scripted = 300.0 * seconds;
    assert!(
        (energy - scripted).abs() <= 0.05 * scripted,
        "{energy} J against the scripted {scripted} J: both GPUs' power, summed"
    );
}

#[test]
fn gpuspan_devices_numbers_amd_devices_after_every_nvidia_gpu() {
    let fake = FakeNvml::build();
    fake.set_device_count(2);
    let root = tempfile::tempdir().unwrap();
    let device = amd_card(root.path(), 2);
    std::fs::write(device.join("mem_info_vram_used"), "4096\n").unwrap();

    let receiver = Receiver::start_grpc();
    let builder = builder(&receiver, &fake, root.path(), "2");
    let (telemetry, ()) = sampling::run(builder, |telemetry| {
        let devices = telemetry.devices();
        let seen: Vec<_> = devices
            .iter()
            .map(|d| (d.device.index, d.device.vendor.clone()))
            .collect();
        assert_eq!(seen, [(2, "AMD".to_owned())], "the AMD GPU is device 2");
        assert_eq!(telemetry.memory_source(), Some("amdgpu-sysfs"));
    });
    telemetry.shutdown().expect("clean shutdown");
}

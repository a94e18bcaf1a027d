//! `gpuspan watch` prints each device's memory through NVML, a line per interval, and says
//! plainly when there is no GPU to watch.

use gpuspan_test_support as support;

use std::process::Command;

use support::commands::succeeded;
use support::fake_nvml::FakeNvml;

#[test]
fn prints_used_and_installed_memory_of_every_device() {
    let fake = FakeNvml::build();
    let out = succeeded(
        Command::new(env!("CARGO_BIN_EXE_gpuspan"))
            .args(["watch", "--every", "20ms", "--count", "3"])
            .env("GPUSPAN_NVML_LIB", fake.path())
            .env("FAKE_NVML_DEVICES", "2")
            .env("FAKE_NVML_USED_MIB", "2048")
            .env("FAKE_NVML_TOTAL_MIB", "81920"),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = stdout.lines().collect();
    assert_eq!(lines.len(), 3, "{stdout}");
    for line in lines {
        assert_eq!(
            line,
            "gpu 0: 2048 MiB / 81920 MiB   gpu 1: 2048 MiB / 81920 MiB"
        );
    }
}

#[test]
fn without_a_gpu_it_says_so_and_fails() {
    let out = Command::new(env!("CARGO_BIN_EXE_gpuspan"))
        .args(["watch", "--count", "1"])
        .env("GPUSPAN_NVML_LIB", "/nonexistent/libnvidia-ml.so.1")
        .env("PATH", "/nonexistent")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("no GPU to watch"), "{stderr}");
}

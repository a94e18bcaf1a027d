//! `gpuspan collect` on a machine with an NVIDIA GPU (the fake NVML) and an AMD GPU (a
//! written sysfs tree) measures both: a span received gets the sum of the two devices and
//! each device's own figure, and says that both sources were read.

use gpuspan_test_support as support;

use support::fake_nvml::{FakeNvml, MIB};
use support::json_collector::collect_one_span;
use support::otlp_json::{attribute, int};

/// An amdgpu card with 6 GiB of its memory in use (`mem_info_vram_used`).
const AMD_TREE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../tests/fixtures/drm/amdgpu-old-keys/sys"
);
const AMD_USED: i64 = 6 << 30;

#[test]
fn a_span_gets_the_memory_of_the_nvidia_and_the_amd_gpu() {
    let fake = FakeNvml::build();
    let dir = tempfile::tempdir().unwrap();
    let procfs = tempfile::tempdir().unwrap();
    let collected = collect_one_span(env!("CARGO_BIN_EXE_gpuspan"), dir.path(), |command| {
        command
            .env("GPUSPAN_NVML_LIB", fake.path())
            .env("GPUSPAN_SYSFS_ROOT", AMD_TREE)
            .env("GPUSPAN_PROCFS_ROOT", procfs.path())
            .env("FAKE_NVML_DEVICES", "1")
            .env("FAKE_NVML_USED_MIB", "1500")
            .env_remove("CUDA_VISIBLE_DEVICES")
            .env_remove("ROCR_VISIBLE_DEVICES")
            .env_remove("HIP_VISIBLE_DEVICES")
            .env_remove("GPUSPAN_DEVICES");
    });

    let span = &collected.span;
    let nvidia = 1500 * MIB as i64;
    assert_eq!(
        attribute(span, "gpu.memory.source").and_then(|v| v["stringValue"].as_str()),
        Some("nvml+amdgpu-sysfs"),
        "{span:#}"
    );
    assert_eq!(int(span, "gpu.0.memory.peak"), Some(nvidia), "{span:#}");
    assert_eq!(int(span, "gpu.1.memory.peak"), Some(AMD_USED), "{span:#}");
    assert_eq!(int(span, "gpu.memory.peak"), Some(nvidia + AMD_USED));
    assert_eq!(int(span, "gpu.memory.start"), Some(nvidia + AMD_USED));
    assert_eq!(int(span, "gpu.memory.end"), Some(nvidia + AMD_USED));
}

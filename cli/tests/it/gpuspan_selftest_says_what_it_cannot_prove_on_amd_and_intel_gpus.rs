//! `gpuspan selftest` proves the peak by allocating through CUDA, which does not reach AMD
//! or Intel GPUs: on a machine with only those (a written sysfs tree) it says that it
//! cannot prove the peak there, shows what their files say now and exits 2; on a machine
//! with an NVIDIA GPU too (the fake driver pair) it proves the NVIDIA GPU's peak and says
//! the same of the AMD GPU, without failing for it.

use gpuspan_test_support as support;

use std::path::Path;
use std::process::Output;

use support::example::clean_command;
use support::fake_nvml::FakeNvml;

/// An amdgpu card, `GPU-2a8c4c9f3b6e1d52`, with 6 GiB of its memory in use.
const AMD_TREE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../tests/fixtures/drm/amdgpu-old-keys/sys"
);

/// `gpuspan selftest` on the AMD tree, NVML loaded from `nvml`, CUDA looked up in `lib_dir`.
fn selftest(nvml: &Path, lib_dir: &Path) -> Output {
    let procfs = tempfile::tempdir().unwrap();
    clean_command(
        env!("CARGO_BIN_EXE_gpuspan"),
        &["selftest", "--mib", "64"],
        &[],
    )
    .env("GPUSPAN_NVML_LIB", nvml)
    .env("GPUSPAN_SYSFS_ROOT", AMD_TREE)
    .env("GPUSPAN_PROCFS_ROOT", procfs.path())
    .env("LD_LIBRARY_PATH", lib_dir)
    .env_remove("ROCR_VISIBLE_DEVICES")
    .env_remove("HIP_VISIBLE_DEVICES")
    .output()
    .expect("gpuspan runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The lines that say what the selftest cannot prove on the AMD GPU, and what it read.
fn assert_says_what_it_cannot_prove(said: &str) {
    assert!(
        said.contains("1 AMD or Intel device(s) read from the kernel's files (amdgpu-sysfs)")
            && said.contains("cannot prove")
            && said.contains("GPU-2a8c4c9f3b6e1d52: 6144 MiB used of"),
        "{said}"
    );
}

#[test]
fn with_only_an_amd_gpu_it_says_it_cannot_prove_the_peak_there_and_exits_2() {
    let empty = tempfile::tempdir().unwrap();
    let out = selftest(&empty.path().join("libnvidia-ml.so.1"), empty.path());
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(out.stdout.is_empty(), "{}", text(&out.stdout));
    assert!(
        stderr.contains("gpuspan selftest: no device it can test through CUDA"),
        "{stderr}"
    );
    assert_says_what_it_cannot_prove(&stderr);
}

#[test]
fn beside_an_nvidia_gpu_it_proves_that_one_and_says_what_it_cannot_prove_on_the_amd_gpu() {
    let fake = FakeNvml::build();
    let cuda = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(fake.path(), cuda.path().join("libcuda.so")).unwrap();
    let out = selftest(fake.path(), cuda.path());
    let table = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{table}{}", text(&out.stderr));
    assert!(
        table.starts_with("gpuspan selftest: 1 of 2 device(s) reached through CUDA"),
        "{table}"
    );
    assert!(
        table
            .lines()
            .any(|l| l.trim_start().starts_with('0') && l.ends_with("ok")),
        "{table}"
    );
    assert_says_what_it_cannot_prove(&table);
}

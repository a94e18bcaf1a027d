//! `gpuspan selftest` against the fake driver pair: the fake `libnvidia-ml` answering as
//! `libcuda` too, so a CUDA allocation raises the memory NVML reports, as on a GPU. The
//! command allocates on each device, and the spans read back must show the held allocation
//! and a two-interval spike in their peaks and this process's figures; a device whose
//! memory never moves fails the check, and a machine without the CUDA driver is told so.

use gpuspan_test_support as support;

use std::path::Path;
use std::process::Output;

use support::example::clean_command;
use support::fake_nvml::{mig_uuid_of, FakeNvml};

/// `gpuspan selftest` with `args`, the fake as NVML and, through `lib_dir`, as libcuda.
fn selftest(fake: &FakeNvml, lib_dir: &Path, args: &[&str], envs: &[(&str, &str)]) -> Output {
    let args: Vec<&str> = ["selftest"].iter().chain(args).copied().collect();
    clean_command(env!("CARGO_BIN_EXE_gpuspan"), &args, envs)
        .env("GPUSPAN_NVML_LIB", fake.path())
        .env("LD_LIBRARY_PATH", lib_dir)
        .output()
        .expect("gpuspan runs")
}

/// A directory where `libcuda.so` is the fake: the same file, so one state.
fn cuda_dir(fake: &FakeNvml) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(fake.path(), dir.path().join("libcuda.so")).unwrap();
    dir
}

/// The table of a `gpuspan selftest --mib <mib>` on the fake pair that must pass.
fn passing_table(mib: &str, envs: &[(&str, &str)]) -> String {
    let fake = FakeNvml::build();
    let dir = cuda_dir(&fake);
    let out = selftest(&fake, dir.path(), &["--mib", mib], envs);
    let table = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{table}{}", text(&out.stderr));
    table
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The table's lines, their runs of spaces folded to one.
fn lines(table: &str) -> Vec<String> {
    table
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect()
}

#[test]
fn every_allocation_is_in_the_held_and_spike_peaks_and_this_process_figures() {
    let table = passing_table(
        "300",
        &[("FAKE_NVML_DEVICES", "2"), ("FAKE_CUDA_CONTEXT_MIB", "480")],
    );
    assert!(
        table.starts_with(
            "gpuspan selftest: 2 of 2 device(s) reached through CUDA, 300 MiB allocated on \
             each, sampling every 5ms\n"
        ),
        "{table}"
    );
    // 300 MiB is 150 pages of 2 MiB: the driver's figures rise by exactly that, in the
    // held span, the spike's span and this process's list.
    let lines = lines(&table);
    assert_eq!(
        lines[1],
        "gpu name context allocated held rise spike rise process rise result"
    );
    for gpu in [0, 1] {
        assert_eq!(
            lines[2 + gpu],
            format!("{gpu} NVIDIA H200 (fake) 480 MiB 300 MiB 300 MiB 300 MiB 300 MiB ok"),
            "{table}"
        );
    }
    assert!(table.contains("NVML: a memory read takes "), "{table}");
    assert!(table.contains("the sampler kept "), "{table}");
    // What was drawn while each allocation was held, from the fake's 300 W a GPU: the
    // counters' figure, or with a span shorter than their period the power readings'.
    for gpu in [0, 1] {
        let line = lines
            .iter()
            .find(|l| l.starts_with(&format!("energy: while gpu {gpu}'s allocation was held (")))
            .unwrap_or_else(|| panic!("no energy line for gpu {gpu}: {table}"));
        let watts: f64 = line
            .split(" J, ")
            .nth(1)
            .and_then(|rest| rest.split(' ').next())
            .and_then(|w| w.parse().ok())
            .unwrap_or_else(|| panic!("no watts in {line}"));
        assert!(watts > 0.0, "{line}");
        assert!(
            line.ends_with("(estimated from power readings)")
                || line.ends_with("(the driver's energy counter)"),
            "{line}"
        );
    }
}

/// CUDA's first UUID call answers an instance with its GPU's UUID, as the real driver's
/// does (the fake's too): selftest must pair the instance by its own.
#[test]
fn on_a_mig_instance_the_allocation_is_in_that_instances_figures() {
    let instance = mig_uuid_of(0, 1);
    let table = passing_table(
        "300",
        &[
            ("FAKE_NVML_DEVICES", "1"),
            ("FAKE_NVML_MIG", "0:2:16384"),
            ("FAKE_CUDA_CONTEXT_MIB", "480"),
            ("CUDA_VISIBLE_DEVICES", &instance),
        ],
    );
    assert!(
        table.starts_with("gpuspan selftest: 1 of 1 device(s) reached through CUDA"),
        "{table}"
    );
    assert_eq!(
        lines(&table)[2],
        "0.mig1 NVIDIA H200 (fake) MIG 1g.18gb 480 MiB 300 MiB 300 MiB 300 MiB 300 MiB ok",
        "{table}"
    );
}

/// CUDA numbers only the devices `CUDA_VISIBLE_DEVICES` names, in its order: CUDA's device 0
/// is GPU 2 here. selftest pairs CUDA's devices with NVML's by UUID, so each allocation is
/// checked on the GPU that holds it.
#[test]
fn cuda_numbering_its_visible_devices_its_own_way_changes_nothing() {
    let table = passing_table(
        "100",
        &[
            ("FAKE_NVML_DEVICES", "3"),
            ("FAKE_CUDA_CONTEXT_MIB", "480"),
            ("CUDA_VISIBLE_DEVICES", "2,0"),
        ],
    );
    assert!(
        table.starts_with("gpuspan selftest: 2 of 2 device(s) reached through CUDA"),
        "{table}"
    );
    let mut rows: Vec<String> = lines(&table)[2..4].to_vec();
    rows.sort();
    for (row, gpu) in rows.iter().zip([0, 2]) {
        assert_eq!(
            *row,
            format!("{gpu} NVIDIA H200 (fake) 480 MiB 100 MiB 100 MiB 100 MiB 100 MiB ok"),
            "{table}"
        );
    }
}

#[test]
fn a_device_whose_memory_never_moves_fails_the_check() {
    let fake = FakeNvml::build();
    let dir = cuda_dir(&fake);
    // Device 0's used memory follows a timeline that never changes, whatever is allocated.
    let timeline = dir.path().join("flat.txt");
    std::fs::write(&timeline, "0 0 1073741824\n").unwrap();
    let out = selftest(
        &fake,
        dir.path(),
        &["--mib", "64"],
        &[("FAKE_NVML_TIMELINE", timeline.to_str().unwrap())],
    );
    let table = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{table}{}", text(&out.stderr));
    assert!(
        table.contains(
            "FAILED: the held peak missed the allocation; the spike peak missed the allocation"
        ),
        "{table}"
    );
}

#[test]
fn an_allocation_the_driver_refuses_fails_with_its_error() {
    let fake = FakeNvml::build();
    let dir = cuda_dir(&fake);
    let out = selftest(
        &fake,
        dir.path(),
        &["--mib", "64"],
        &[("FAKE_CUDA_FAIL_ALLOC", "1")],
    );
    let table = text(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{table}{}", text(&out.stderr));
    assert!(
        table.contains("FAILED: could not allocate 64 MiB: DriverError(CUDA_ERROR_OUT_OF_MEMORY"),
        "{table}"
    );
}

#[test]
fn without_the_cuda_driver_it_says_so_and_exits_2() {
    let fake = FakeNvml::build();
    let empty = tempfile::tempdir().unwrap();
    let out = selftest(&fake, empty.path(), &[], &[]);
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty(), "{}", text(&out.stdout));
    assert_eq!(
        text(&out.stderr),
        "gpuspan selftest: the CUDA driver library (libcuda.so) could not be loaded: this \
         machine has no NVIDIA driver, or its library is not on the loader's path \
         (LD_LIBRARY_PATH)\n"
    );
}

/// The spans are written under the temporary directory (`TMPDIR`) in a directory of the
/// selftest's own, which no one else can read or prepare, and which is gone afterwards.
#[test]
fn its_scratch_directory_is_private_and_removed_afterwards() {
    use std::os::unix::fs::PermissionsExt;
    let fake = FakeNvml::build();
    let dir = cuda_dir(&fake);
    let tmp = tempfile::tempdir().unwrap();
    let mut child = clean_command(
        env!("CARGO_BIN_EXE_gpuspan"),
        &["selftest", "--mib", "64"],
        &[("TMPDIR", tmp.path().to_str().unwrap())],
    )
    .env("GPUSPAN_NVML_LIB", fake.path())
    .env("LD_LIBRARY_PATH", dir.path())
    .stdout(std::process::Stdio::null())
    .stderr(std::process::Stdio::null())
    .spawn()
    .unwrap();
    // Every directory seen in TMPDIR while the selftest runs, with its permissions.
    let mut seen = std::collections::BTreeMap::new();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let status = loop {
        for entry in std::fs::read_dir(tmp.path()).unwrap().flatten() {
            if let Ok(meta) = std::fs::symlink_metadata(entry.path()) {
                seen.insert(entry.file_name(), meta.permissions().mode() & 0o7777);
            }
        }
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(std::time::Instant::now() < deadline, "selftest never ended");
        std::thread::sleep(std::time::Duration::from_millis(2));
    };
    assert_eq!(status.code(), Some(0));
    assert_eq!(seen.len(), 1, "one scratch directory: {seen:?}");
    let (name, mode) = seen.into_iter().next().unwrap();
    assert_eq!(mode, 0o700, "{name:?} is {mode:o}");
    assert_eq!(
        std::fs::read_dir(tmp.path()).unwrap().count(),
        0,
        "the scratch directory is removed"
    );
}

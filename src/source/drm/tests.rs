//! The source read over the fixture trees of `tests/fixtures/drm`, one a case, written
//! from the kernel documentation's formats. A tree's `self` directories stand for this
//! process: they are copied under its pid.

use std::path::{Path, PathBuf};

use super::*;

mod denied;
mod gpu_metrics;
mod hostile;
mod hwmon;
mod throttle;

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;

/// A fixture copied into a temporary directory, `self` renamed to this process's pid.
struct Tree {
    dir: tempfile::TempDir,
}

impl Tree {
    fn of(case: &str) -> Self {
        let from = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/drm")
            .join(case);
        let dir = tempfile::tempdir().unwrap();
        copy(&from, dir.path());
        Self { dir }
    }

    fn roots(&self) -> Roots {
        Roots {
            sysfs: self.dir.path().join("sys"),
            procfs: self.dir.path().join("proc"),
        }
    }

    fn path(&self, relative: &str) -> PathBuf {
        self.dir
            .path()
            .join(relative.replace("self", &std::process::id().to_string()))
    }

    fn open(&self) -> DrmSource {
        DrmSource::open(&self.roots(), &DrmScope::default(), 0).unwrap()
    }
}

fn copy(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name();
        let name = if name == "self" {
            std::process::id().to_string().into()
        } else {
            name
        };
        if entry.file_type().unwrap().is_dir() {
            copy(&entry.path(), &to.join(name));
        } else {
            std::fs::copy(entry.path(), to.join(name)).unwrap();
        }
    }
}

fn read(source: &mut DrmSource) -> Vec<DeviceReading> {
    let mut out = vec![DeviceReading::default(); source.devices().len()];
    source.read(&mut out);
    out
}

#[test]
fn amdgpu_with_the_older_keys_only_reads_drm_memory_vram() {
    let tree = Tree::of("amdgpu-old-keys");
    let mut source = tree.open();
    assert_eq!(source.name(), "amdgpu-sysfs");
    let device = &source.devices()[0];
    assert_eq!(
        (device.index, device.uuid.as_str(), device.vendor.as_str()),
        (0, "GPU-2a8c4c9f3b6e1d52", "AMD")
    );
    assert_eq!(device.name, "AMD GPU 1002:74A1");
    let reading = &read(&mut source)[0];
    assert_eq!(reading.used, Some(6 * GIB));
    assert_eq!(reading.total, Some(206_141_652_992));
    assert_eq!(reading.utilization, Some(0.37));
    assert_eq!(reading.process_used, Some(GIB));
    assert_eq!(reading.error, None);
}

#[test]
fn amdgpu_with_both_key_sets_reads_drm_resident_only() {
    let tree = Tree::of("amdgpu-both-keys");
    let reading = &read(&mut tree.open())[0];
    assert_eq!(reading.process_used, Some(1536 * MIB));
}

#[test]
fn an_apu_without_vram_keys_has_no_process_figure_rather_than_zero() {
    let tree = Tree::of("apu-without-vram-keys");
    let mut source = tree.open();
    assert_eq!(source.devices()[0].uuid, "0000:c4:00.0");
    let reading = &read(&mut source)[0];
    assert_eq!(reading.used, Some(384 * MIB));
    assert_eq!(
        reading.process_used, None,
        "gtt is host memory, never GPU memory"
    );
}

#[test]
fn xe_sums_every_process_s_vram0_and_leaves_gtt_out() {
    let tree = Tree::of("xe-vram0-gtt");
    let mut source = tree.open();
    assert_eq!(source.name(), "drm-fdinfo");
    let device = &source.devices()[0];
    assert_eq!(
        (device.uuid.as_str(), device.vendor.as_str()),
        ("0000:03:00.0", "Intel")
    );
    let reading = &read(&mut source)[0];
    assert_eq!(reading.total, Some(16 * GIB));
    assert_eq!(reading.used, Some(500 * MIB));
    assert_eq!(reading.process_used, Some(300 * MIB));
}

#[test]
fn i915_counts_local0_as_device_memory_and_system0_as_host_memory() {
    let tree = Tree::of("i915-system0-local0");
    let reading = &read(&mut tree.open())[0];
    assert_eq!(reading.used, Some(700 * MIB));
    assert_eq!(
        reading.total, None,
        "i915 gives no total through these files"
    );
    assert_eq!(reading.process_used, Some(700 * MIB));
}

#[test]
fn two_fds_of_one_client_count_once() {
    let tree = Tree::of("two-fds-one-client");
    assert_eq!(read(&mut tree.open())[0].process_used, Some(3 * GIB));
}

#[test]
fn two_clients_of_one_process_add_up() {
    let tree = Tree::of("two-clients-one-process");
    assert_eq!(read(&mut tree.open())[0].process_used, Some(4 * GIB));
}

#[test]
fn bytes_kib_and_mib_are_all_bytes() {
    let tree = Tree::of("bytes-kib-mib");
    assert_eq!(read(&mut tree.open())[0].process_used, Some(3 * MIB));
}

#[test]
fn a_malformed_line_is_skipped_and_the_rest_counts() {
    let tree = Tree::of("malformed-line");
    assert_eq!(read(&mut tree.open())[0].process_used, Some(64 * MIB));
}

#[test]
fn an_unreadable_fdinfo_leaves_the_process_figure_absent_not_low() {
    let tree = Tree::of("unreadable-fdinfo");
    let reading = &read(&mut tree.open())[0];
    assert_eq!(
        reading.used,
        Some(8 * GIB),
        "the device figure does not depend on it"
    );
    assert_eq!(reading.process_used, None);
}

#[test]
fn kfd_orders_the_devices_and_gives_a_rocm_process_s_memory() {
    let tree = Tree::of("two-amd-gpus-with-kfd");
    let mut source = tree.open();
    let uuids: Vec<_> = source.devices().iter().map(|d| d.uuid.clone()).collect();
    assert_eq!(uuids, ["GPU-7b1d0e6f5a4c3b21", "GPU-2a8c4c9f3b6e1d52"]);
    let readings = read(&mut source);
    assert_eq!(readings[0].used, Some(4 * GIB));
    assert_eq!(readings[0].process_used, Some(2 * GIB));
    assert_eq!(readings[1].process_used, Some(GIB));
}

#[test]
fn a_device_removed_mid_run_fails_alone_and_the_other_keeps_reporting() {
    let tree = Tree::of("two-amd-gpus-with-kfd");
    let mut source = tree.open();
    assert!(read(&mut source).iter().all(|r| r.error.is_none()));
    std::fs::remove_dir_all(tree.path("sys/class/drm/card1")).unwrap();
    let readings = read(&mut source);
    let error = readings[0]
        .error
        .as_deref()
        .expect("the removed device fails");
    assert!(error.contains("gone"), "{error}");
    assert_eq!(readings[0].used, None);
    assert_eq!(readings[1].used, Some(8 * GIB));
    assert_eq!(readings[1].error, None);
}

#[test]
fn an_intel_device_removed_mid_run_fails() {
    let tree = Tree::of("xe-vram0-gtt");
    let mut source = tree.open();
    std::fs::remove_dir_all(tree.path("sys/class/drm/card1")).unwrap();
    let reading = &read(&mut source)[0];
    assert!(reading.error.as_deref().is_some_and(|e| e.contains("gone")));
    assert_eq!(reading.used, None);
}

#[test]
fn a_figure_written_meanwhile_is_read_at_the_next_read() {
    let tree = Tree::of("two-clients-one-process");
    let mut source = tree.open();
    assert_eq!(read(&mut source)[0].process_used, Some(4 * GIB));
    std::fs::write(
        tree.path("sys/class/drm/card0/device/mem_info_vram_used"),
        "12345\n",
    )
    .unwrap();
    std::fs::write(
        tree.path("proc/self/fdinfo/9"),
        "drm-driver:\tamdgpu\ndrm-pdev:\t0000:03:00.0\ndrm-client-id:\t13\ndrm-resident-vram:\t2 MiB\n",
    )
    .unwrap();
    let reading = &read(&mut source)[0];
    assert_eq!(reading.used, Some(12345));
    assert_eq!(reading.process_used, Some(3 * GIB + 2 * MIB));
}

#[test]
fn no_drm_device_is_an_error_that_names_the_directory() {
    let dir = tempfile::tempdir().unwrap();
    let roots = Roots {
        sysfs: dir.path().to_path_buf(),
        procfs: dir.path().to_path_buf(),
    };
    let why = DrmSource::open(&roots, &DrmScope::default(), 0)
        .unwrap_err()
        .to_string();
    assert!(why.contains("class/drm"), "{why}");
}

#[test]
fn the_runtimes_lists_narrow_the_devices() {
    let tree = Tree::of("two-amd-gpus-with-kfd");
    let scope = DrmScope {
        amd: vec![scope::Visible::parse("1").unwrap()],
        ..DrmScope::default()
    };
    let source = DrmSource::open(&tree.roots(), &scope, 2).unwrap();
    let devices: Vec<_> = source
        .devices()
        .iter()
        .map(|d| (d.index, d.uuid.clone()))
        .collect();
    assert_eq!(devices, [(3, "GPU-2a8c4c9f3b6e1d52".to_owned())]);
}

#[test]
fn each_compute_partition_is_a_device_of_its_own_read_through_kfd() {
    let tree = Tree::of("mi300x-four-compute-partitions");
    let mut source = tree.open();
    assert_eq!(source.name(), "kfd");
    let devices: Vec<_> = source
        .devices()
        .iter()
        .map(|d| (d.index, d.uuid.clone(), d.name.clone()))
        .collect();
    assert_eq!(
        devices,
        (0..4u32)
            .map(|p| (
                p,
                format!("GPU-{:016x}", 1001 + p),
                format!("AMD Instinct MI300X partition {p}")
            ))
            .collect::<Vec<_>>()
    );
    let readings = read(&mut source);
    let used: Vec<_> = readings.iter().map(|r| r.used).collect();
    assert_eq!(used, [Some(1280 * MIB), Some(5 * GIB), Some(0), Some(0)]);
    let mine: Vec<_> = readings.iter().map(|r| r.process_used).collect();
    assert_eq!(mine, [Some(GIB), Some(0), Some(0), Some(0)]);
    assert!(readings.iter().all(|r| r.total == Some(48 * GIB)));
    assert!(
        readings.iter().all(|r| r.utilization.is_none()),
        "the busy figure is the whole GPU's"
    );
}

#[test]
fn partitions_that_share_the_gpu_s_unique_id_are_still_one_device_each() {
    let tree = Tree::of("mi300x-four-compute-partitions");
    for node in 1..=4 {
        let path = tree.path(&format!(
            "sys/class/kfd/kfd/topology/nodes/{node}/properties"
        ));
        let properties = std::fs::read_to_string(&path).unwrap();
        let shared = properties
            .lines()
            .map(|line| match line.starts_with("unique_id ") {
                true => "unique_id 1001".to_owned(),
                false => line.to_owned(),
            })
            .collect::<Vec<_>>()
            .join("\n");
        std::fs::write(&path, shared).unwrap();
    }
    let source = tree.open();
    let devices: Vec<_> = source
        .devices()
        .iter()
        .map(|d| (d.index, d.uuid.clone()))
        .collect();
    assert_eq!(
        devices,
        (0..4u32)
            .map(|p| (p, format!("0000:0c:00.0-partition{p}")))
            .collect::<Vec<_>>()
    );
}

#[test]
fn a_rank_picks_its_own_partition() {
    let tree = Tree::of("mi300x-four-compute-partitions");
    let scope = DrmScope {
        position: Some(2),
        ..DrmScope::default()
    };
    let source = DrmSource::open(&tree.roots(), &scope, 0).unwrap();
    let uuids: Vec<_> = source.devices().iter().map(|d| d.uuid.clone()).collect();
    assert_eq!(uuids, [format!("GPU-{:016x}", 1003)]);
}

/// What a read of this process's clients in `tree` says once, over three reads.
fn notices(tree: &Tree) -> Vec<Notice> {
    let mut clients = Clients::new(&tree.roots().procfs, std::process::id(), Whose::Own);
    let mut said = Vec::new();
    for _ in 0..3 {
        clients.read(std::time::Instant::now());
        said.extend(clients.take_notices());
    }
    said
}

#[test]
fn an_apu_s_client_is_named_once_with_the_file() {
    let tree = Tree::of("apu-without-vram-keys");
    assert_eq!(
        notices(&tree),
        [Notice::NoDeviceRegion(tree.path("proc/self/fdinfo/5"))]
    );
}

#[test]
fn an_unreadable_fdinfo_is_named_once_with_the_file() {
    let tree = Tree::of("unreadable-fdinfo");
    let said = notices(&tree);
    assert_eq!(said.len(), 1, "{said:?}");
    let Notice::Unreadable(why) = &said[0] else {
        panic!("{said:?}");
    };
    assert!(why.contains("fdinfo/7"), "{why}");
}

#[test]
fn clean_clients_say_nothing() {
    assert_eq!(notices(&Tree::of("two-clients-one-process")), []);
}

#[test]
fn a_uuid_prefix_that_starts_two_amd_gpus_is_an_error_naming_both() {
    let tree = Tree::of("two-amd-gpus-with-kfd");
    for scope in [
        DrmScope {
            amd: vec![scope::Visible::parse("GPU-").unwrap()],
            ..DrmScope::default()
        },
        DrmScope {
            chosen: Some(crate::source::DeviceScope::parse("GPU-").unwrap()),
            ..DrmScope::default()
        },
    ] {
        let why = DrmSource::open(&tree.roots(), &scope, 0).unwrap_err();
        let NoDrmDevice::Ambiguous(ambiguous) = why else {
            panic!("{why:?}")
        };
        let text = ambiguous.to_string();
        assert!(text.contains("'GPU-'"), "{text}");
        assert!(text.contains("GPU-7b1d0e6f5a4c3b21"), "{text}");
        assert!(text.contains("GPU-2a8c4c9f3b6e1d52"), "{text}");
    }
}

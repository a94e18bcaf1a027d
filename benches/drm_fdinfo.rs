//! What reading this process's own DRM clients costs the sampler on an AMD or Intel GPU:
//! 64 open fds on a render node, each its own client with `drm-resident-*` keys, read from
//! `<procfs>/<pid>/fdinfo` as the sampler does at every tick.
//!
//! - `read`: one sampler read (the fds are looked through again every 250 ms, which this
//!   includes at that rate);
//! - `first read`: the look through `fd/` (a `readlink` per fd) and every fdinfo, as after
//!   a rescan;
//! - `first read` with 4,096 other fds open (sockets, files: a data loader's), which the
//!   look through `fd/` every 250 ms pays a `readlink` each for.
//!
//! The tree is written to a temporary directory, so the figure is the file system's cost
//! of 64 small reads plus the parsing: a real kernel also builds each fdinfo text (amdgpu
//! walks the client's buffer objects under its VM lock), which this leaves out. Compare
//! NVML's per-process list: 4.5 ms a call on a real driver, holding the driver's lock
//! (BENCHMARKS.md).
//!
//! `cargo bench --features __bench --bench drm_fdinfo`

use std::path::Path;
use std::time::Instant;

use criterion::{criterion_group, criterion_main, Criterion};
use gpuspan::__drm::OwnClients;

const FDS: u32 = 64;
const PID: u32 = 4242;

/// Other fds of the process, beside its clients: not DRM devices.
fn write_other_fds(root: &Path, count: u32) {
    let fd = root.join(format!("{PID}/fd"));
    for n in 1000..1000 + count {
        std::os::unix::fs::symlink(format!("socket:[{n}]"), fd.join(n.to_string())).unwrap();
    }
}

fn write_tree(root: &Path) {
    let fd = root.join(format!("{PID}/fd"));
    let fdinfo = root.join(format!("{PID}/fdinfo"));
    std::fs::create_dir_all(&fd).unwrap();
    std::fs::create_dir_all(&fdinfo).unwrap();
    // stdin, stdout, stderr and a log file: not DRM devices.
    for n in 0..4 {
        std::os::unix::fs::symlink("/dev/null", fd.join(n.to_string())).unwrap();
        std::fs::write(
            fdinfo.join(n.to_string()),
            "pos:\t0\nflags:\t02\nmnt_id:\t26\n",
        )
        .unwrap();
    }
    for n in 4..4 + FDS {
        std::os::unix::fs::symlink("/dev/dri/renderD128", fd.join(n.to_string())).unwrap();
        std::fs::write(
            fdinfo.join(n.to_string()),
            format!(
                "pos:\t0\nflags:\t02100002\nmnt_id:\t26\nino:\t1085\ndrm-driver:\tamdgpu\n\
                 drm-pdev:\t0000:03:00.0\ndrm-client-id:\t{n}\npasid:\t32770\n\
                 drm-memory-vram:\t{kib} KiB\ndrm-memory-gtt:\t2048 KiB\n\
                 drm-memory-cpu:\t0 KiB\ndrm-total-vram:\t{kib} KiB\ndrm-shared-vram:\t0\n\
                 drm-active-vram:\t0\ndrm-resident-vram:\t{kib} KiB\n\
                 drm-purgeable-vram:\t0\ndrm-total-gtt:\t2048 KiB\n\
                 drm-resident-gtt:\t2048 KiB\ndrm-engine-gfx:\t1273612 ns\n\
                 drm-engine-compute:\t93612 ns\namd-memory-visible-vram:\t0\n",
                kib = 1024 * u64::from(n)
            ),
        )
        .unwrap();
    }
}

fn fdinfo(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    write_tree(dir.path());
    let expected: u64 = (4..4 + u64::from(FDS)).map(|n| n << 20).sum();

    let mut clients = OwnClients::new(dir.path(), PID);
    assert_eq!(clients.read(Instant::now()), Some(expected));
    c.bench_function("drm fdinfo: read, 64 fds", |b| {
        b.iter(|| clients.read(Instant::now()))
    });
    c.bench_function("drm fdinfo: first read (readlink 68 fds), 64 fds", |b| {
        b.iter(|| OwnClients::new(dir.path(), PID).read(Instant::now()))
    });
    write_other_fds(dir.path(), 4096);
    assert_eq!(
        OwnClients::new(dir.path(), PID).read(Instant::now()),
        Some(expected)
    );
    c.bench_function("drm fdinfo: first read (readlink 4164 fds), 64 fds", |b| {
        b.iter(|| OwnClients::new(dir.path(), PID).read(Instant::now()))
    });
}

criterion_group!(benches, fdinfo);
criterion_main!(benches);

//! Files the kernel refuses to this user (`EACCES`): each is named in a clear line and its
//! figure is left out, never replaced by zero or by host memory.
//!
//! A mode of 000 refuses nobody running with `CAP_DAC_OVERRIDE` (root, usually), so each
//! test reads with that capability and `CAP_DAC_READ_SEARCH` out of its thread's effective
//! set, as any other user reads, and first checks that the file is refused indeed.

use std::os::unix::fs::PermissionsExt;

use super::*;

/// `CAP_DAC_OVERRIDE` and `CAP_DAC_READ_SEARCH` as bits of a capability set's first word.
const DAC_BYPASS: u32 = (1 << 1) | (1 << 2);
/// `_LINUX_CAPABILITY_VERSION_3`: two 32-bit words per set.
const CAPABILITY_VERSION_3: u32 = 0x2008_0522;

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// Runs `f` on this thread with the DAC bypass out of its effective capabilities (the
/// kernel keeps capabilities per thread, so the other tests' threads keep theirs), then
/// puts them back: a file's mode then applies to this thread as to any user.
fn as_any_user<R>(f: impl FnOnce() -> R) -> R {
    let mut header = CapHeader {
        version: CAPABILITY_VERSION_3,
        pid: 0,
    };
    let mut saved = [CapData::default(); 2];
    // SAFETY: version 3 takes a header and two data words, both given.
    let got = unsafe { libc::syscall(libc::SYS_capget, &mut header, saved.as_mut_ptr()) };
    assert_eq!(got, 0, "capget: {}", std::io::Error::last_os_error());
    let mut lowered = saved;
    lowered[0].effective &= !DAC_BYPASS;
    // SAFETY: as above; lowering the effective set is always allowed.
    let set = unsafe { libc::syscall(libc::SYS_capset, &mut header, lowered.as_ptr()) };
    assert_eq!(set, 0, "capset: {}", std::io::Error::last_os_error());
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    // SAFETY: as above; raising back within the permitted set is allowed.
    let back = unsafe { libc::syscall(libc::SYS_capset, &mut header, saved.as_ptr()) };
    assert_eq!(back, 0, "capset: {}", std::io::Error::last_os_error());
    result.unwrap_or_else(|panic| std::panic::resume_unwind(panic))
}

/// Takes every permission away from `path`, and checks (on a thread reading as any user)
/// that opening it fails with `EACCES`.
fn refuse(path: &Path) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o000)).unwrap();
    let opened = std::fs::File::open(path).map(drop);
    let error = opened.expect_err("a file of mode 000 is refused to any user");
    assert_eq!(error.raw_os_error(), Some(libc::EACCES), "{error}");
}

#[test]
fn this_process_s_fdinfo_refused_leaves_its_figure_out_and_names_the_file() {
    let tree = Tree::of("amdgpu-both-keys");
    let fdinfo = tree.path("proc/self/fdinfo/5");
    as_any_user(|| {
        refuse(&fdinfo);
        let mut source = tree.open();
        let reading = &read(&mut source)[0];
        assert_eq!(
            reading.used,
            Some(6 * GIB),
            "the device's own figure still reads"
        );
        assert_eq!(
            reading.process_used, None,
            "not measured: neither zero nor the client's gtt"
        );
        let said = notices(&tree);
        assert_eq!(said.len(), 1, "{said:?}");
        let Notice::Unreadable(why) = &said[0] else {
            panic!("{said:?}")
        };
        assert!(
            why.contains(&fdinfo.display().to_string()) && why.contains("permission denied"),
            "{why}"
        );
    });
}

#[test]
fn a_device_s_sysfs_file_refused_fails_its_reading_with_the_file_named() {
    let tree = Tree::of("amdgpu-both-keys");
    let used = tree.path("sys/class/drm/card0/device/mem_info_vram_used");
    as_any_user(|| {
        refuse(&used);
        let reading = &read(&mut tree.open())[0];
        assert_eq!(reading.used, None);
        assert_eq!(reading.process_used, None);
        let error = reading.error.as_deref().expect("the reading says why");
        assert!(
            error.contains(&used.display().to_string()) && error.contains("permission denied"),
            "{error}"
        );
    });
}

#[test]
fn another_user_s_fdinfo_refused_leaves_that_process_out_of_an_intel_device_s_sum() {
    let tree = Tree::of("xe-vram0-gtt");
    let theirs = tree.path("proc/4242/fdinfo/9");
    as_any_user(|| {
        refuse(&theirs);
        let mut source = tree.open();
        let reading = &read(&mut source)[0];
        // 300 MiB of this process's vram0; the other process's 200 MiB cannot be read, and
        // neither process's gtt is device memory.
        assert_eq!(reading.used, Some(300 * MIB));
        assert_eq!(reading.process_used, Some(300 * MIB));
        let mut clients = Clients::new(&tree.roots().procfs, std::process::id(), Whose::All);
        let mut said = Vec::new();
        for _ in 0..3 {
            clients.read(std::time::Instant::now());
            said.extend(clients.take_notices());
        }
        assert!(
            said.iter()
                .any(|n| matches!(n, Notice::Denied(path) if path == &theirs)),
            "{said:?}"
        );
    });
}

//! Files no kernel writes, and a machine that changes under the sampler: each gives the
//! figures it can, leaves out what it cannot, and names the file in one warning, never a
//! zero or a made-up figure in place of a measurement.

use super::*;

/// `amdgpu-both-keys` with this process's one client's fdinfo (`fd 5`) replaced by `text`.
fn client_says(text: &[u8]) -> Tree {
    let tree = Tree::of("amdgpu-both-keys");
    std::fs::write(tree.path("proc/self/fdinfo/5"), text).unwrap();
    tree
}

const HEAD: &str = "pos:\t0\nflags:\t02100002\ndrm-driver:\tamdgpu\ndrm-pdev:\t0000:03:00.0\n\
                    drm-client-id:\t12\n";

/// The warnings of three reads of this process's clients, as the user reads them.
fn said(tree: &Tree) -> Vec<String> {
    notices(tree).into_iter().map(warning).collect()
}

#[test]
fn a_figure_past_any_device_s_memory_is_left_out_and_its_line_named() {
    for line in [
        "drm-resident-vram:\t18446744073709551615",
        "drm-resident-vram:\t18014398509481984 KiB",
        "drm-resident-vram:\t9223372036854775807",
    ] {
        let tree = client_says(format!("{HEAD}{line}\ndrm-resident-gtt:\t2 MiB\n").as_bytes());
        let reading = &read(&mut tree.open())[0];
        assert_eq!(reading.process_used, None, "{line}");
        let said = said(&tree);
        assert_eq!(said.len(), 1, "{line}: {said:?}");
        let number = line.split('\t').nth(1).unwrap();
        assert!(
            said[0].contains("fdinfo/5") && said[0].contains(number),
            "{line}: {said:?}"
        );
    }
}

#[test]
fn a_device_file_past_any_device_s_memory_fails_its_reading_with_the_file_named() {
    let tree = Tree::of("amdgpu-both-keys");
    let used = tree.path("sys/class/drm/card0/device/mem_info_vram_used");
    std::fs::write(&used, "18446744073709551615\n").unwrap();
    let reading = &read(&mut tree.open())[0];
    assert_eq!(reading.used, None);
    let error = reading.error.as_deref().expect("the reading says why");
    assert!(error.contains(&used.display().to_string()), "{error}");
}

#[test]
fn a_line_of_a_megabyte_leaves_the_figure_out_and_names_the_file() {
    let mut text = format!("{HEAD}drm-resident-vram:\t1 MiB\ndrm-engine-gfx:\t").into_bytes();
    text.extend(std::iter::repeat_n(b'9', 1 << 20));
    text.extend(b" ns\n");
    let tree = client_says(&text);
    let reading = &read(&mut tree.open())[0];
    assert_eq!(reading.process_used, None);
    assert_eq!(
        reading.used,
        Some(6 * GIB),
        "the device's figure still reads"
    );
    let said = said(&tree);
    assert_eq!(said.len(), 1, "{said:?}");
    assert!(said[0].contains("fdinfo/5"), "{said:?}");
}

#[test]
fn non_utf8_bytes_leave_their_line_out_and_a_memory_line_is_named() {
    let mut text = HEAD.as_bytes().to_vec();
    text.extend(b"\xff\xfe:\t\x01\ndrm-resident-vram:\t\xff7 MiB\ndrm-resident-vram:\t1 MiB\n");
    let tree = client_says(&text);
    assert_eq!(read(&mut tree.open())[0].process_used, Some(MIB));
    let said = said(&tree);
    assert_eq!(said.len(), 1, "{said:?}");
    assert!(
        said[0].contains("fdinfo/5") && said[0].contains("drm-resident-vram:"),
        "{said:?}"
    );
}

#[test]
fn another_process_s_fdinfo_that_cannot_be_read_is_named_and_left_out_of_the_sum() {
    let tree = Tree::of("xe-vram0-gtt");
    let theirs = tree.path("proc/4242/fdinfo/9");
    let file = std::fs::File::create(&theirs).unwrap();
    file.set_len(1 << 20).unwrap();
    let reading = &read(&mut tree.open())[0];
    // This process's 300 MiB of vram0; the other's 200 MiB is not read.
    assert_eq!(reading.used, Some(300 * MIB));
    let mut clients = Clients::new(&tree.roots().procfs, std::process::id(), Whose::All);
    let mut said = Vec::new();
    for _ in 0..3 {
        clients.read(std::time::Instant::now());
        said.extend(clients.take_notices().into_iter().map(warning));
    }
    assert_eq!(said.len(), 1, "{said:?}");
    assert!(
        said[0].contains(&theirs.display().to_string()) && said[0].contains("summed"),
        "{said:?}"
    );
}

#[test]
fn a_region_given_twice_counts_once_and_the_second_line_is_named() {
    let tree = client_says(
        format!("{HEAD}drm-resident-vram0:\t1 MiB\ndrm-resident-vram0:\t3 MiB\n").as_bytes(),
    );
    assert_eq!(read(&mut tree.open())[0].process_used, Some(MIB));
    let said = said(&tree);
    assert_eq!(said.len(), 1, "{said:?}");
    assert!(
        said[0].contains("fdinfo/5") && said[0].contains("3 MiB"),
        "{said:?}"
    );
}

#[test]
fn resident_and_older_keys_mixed_in_one_fd_are_never_added() {
    let tree = client_says(
        format!(
            "{HEAD}drm-memory-vram:\t1024 KiB\ndrm-resident-vram0:\t2 MiB\n\
             drm-memory-gtt:\t5 MiB\ndrm-resident-gtt:\t1 MiB\n"
        )
        .as_bytes(),
    );
    assert_eq!(read(&mut tree.open())[0].process_used, Some(2 * MIB));
    assert!(said(&tree).is_empty());
}

#[test]
fn a_client_of_this_process_that_names_no_device_is_not_measured_rather_than_zero() {
    for pdev in [&b""[..], b"drm-pdev:\t\n", b"drm-pdev:\t0000:03:00.\xff\n"] {
        let mut text = b"drm-driver:\tamdgpu\ndrm-client-id:\t12\n".to_vec();
        text.extend(pdev);
        text.extend(b"drm-resident-vram:\t1048576 KiB\n");
        let tree = client_says(&text);
        let reading = &read(&mut tree.open())[0];
        assert_eq!(reading.process_used, None, "{pdev:?}");
        let said = said(&tree);
        assert_eq!(said.len(), 1, "{said:?}");
        assert!(
            said[0].contains("fdinfo/5") && said[0].contains("drm-pdev"),
            "{said:?}"
        );
    }
}

#[test]
fn an_fd_closed_or_reused_between_its_readlink_and_its_read_is_dropped() {
    let tree = Tree::of("amdgpu-both-keys");
    let fd = tree.path("proc/self/fd");
    std::fs::create_dir_all(&fd).unwrap();
    std::os::unix::fs::symlink("/dev/dri/renderD128", fd.join("5")).unwrap();
    let mut source = tree.open();
    assert_eq!(read(&mut source)[0].process_used, Some(1536 * MIB));
    // Closed after the look through `fd/`: its fdinfo is gone at the next read.
    std::fs::remove_file(fd.join("5")).unwrap();
    std::fs::remove_file(tree.path("proc/self/fdinfo/5")).unwrap();
    let reading = &read(&mut source)[0];
    assert_eq!(
        (reading.process_used, reading.error.as_deref()),
        (Some(0), None)
    );
    // Reused for a plain file before the next look: not a client.
    std::os::unix::fs::symlink("/tmp/log", fd.join("5")).unwrap();
    std::fs::write(tree.path("proc/self/fdinfo/5"), "pos:\t0\nflags:\t02\n").unwrap();
    assert_eq!(read(&mut source)[0].process_used, Some(0));
    assert!(said(&tree).is_empty());
}

/// An amdgpu device at PCI slot `slot` under `sys/devices`, with `used` bytes in use.
fn pci_device(tree: &Tree, slot: &str, used: u64) {
    let dir = tree.path(&format!("sys/devices/pci0000:00/{slot}"));
    std::fs::create_dir_all(&dir).unwrap();
    let file = |name: &str, text: String| std::fs::write(dir.join(name), text).unwrap();
    file(
        "uevent",
        format!("DRIVER=amdgpu\nPCI_ID=1002:74A1\nPCI_SLOT_NAME={slot}\n"),
    );
    file("mem_info_vram_used", format!("{used}\n"));
    file("mem_info_vram_total", format!("{}\n", 64 * GIB));
}

/// `class/drm/cardN`, its `device` linked to the PCI device at `slot`, as the kernel does.
fn card_link(tree: &Tree, number: u32, slot: &str) {
    let card = tree.path(&format!("sys/class/drm/card{number}"));
    std::fs::create_dir_all(&card).unwrap();
    std::os::unix::fs::symlink(
        format!("../../../devices/pci0000:00/{slot}"),
        card.join("device"),
    )
    .unwrap();
}

#[test]
fn a_device_removed_then_back_under_another_card_number_reads_again_and_never_another_s() {
    let tree = Tree::of("amdgpu-both-keys");
    std::fs::remove_dir_all(tree.path("sys/class/drm/card0")).unwrap();
    pci_device(&tree, "0000:03:00.0", GIB);
    card_link(&tree, 1, "0000:03:00.0");
    let mut source = tree.open();
    assert_eq!(source.devices()[0].uuid, "0000:03:00.0");
    assert_eq!(read(&mut source)[0].used, Some(GIB));

    std::fs::remove_dir_all(tree.path("sys/class/drm/card1")).unwrap();
    std::fs::remove_dir_all(tree.path("sys/devices/pci0000:00/0000:03:00.0")).unwrap();
    let gone = &read(&mut source)[0];
    assert!(
        gone.error.as_deref().is_some_and(|e| e.contains("gone")),
        "{gone:?}"
    );

    // Another GPU takes the card number: its memory is not this device's.
    pci_device(&tree, "0000:04:00.0", 7 * GIB);
    card_link(&tree, 1, "0000:04:00.0");
    let still_gone = &read(&mut source)[0];
    assert_eq!(still_gone.used, None, "{still_gone:?}");
    assert!(still_gone.error.is_some());

    // The device is back, at its slot, under another number.
    pci_device(&tree, "0000:03:00.0", 2 * GIB);
    card_link(&tree, 2, "0000:03:00.0");
    let back = &read(&mut source)[0];
    assert_eq!((back.used, back.error.as_deref()), (Some(2 * GIB), None));
}

#[test]
fn ze_affinity_mask_forms_pick_whole_devices_and_a_malformed_one_is_named() {
    let pick = |mask: &str| -> Vec<&str> {
        let scope = DrmScope {
            intel: Some(scope::Visible::parse_ze(mask).unwrap()),
            ..DrmScope::default()
        };
        let describe = |name: &&'static str, index: u32| Device {
            index,
            mig: None,
            uuid: (*name).to_owned(),
            name: (*name).to_owned(),
            vendor: "Intel".into(),
        };
        scope
            .select(Vec::new(), vec!["x", "y", "z"], 0, describe)
            .into_iter()
            .map(|(t, _)| t)
            .collect()
    };
    assert_eq!(pick("0"), ["x"]);
    assert_eq!(pick("0.1"), ["x"]);
    assert_eq!(pick("0,1"), ["x", "y"]);
    assert_eq!(pick("2, 0.0,0.1"), ["z", "x"]);
    assert_eq!(pick("7"), Vec::<&str>::new(), "no such device: none");
    for bad in ["x", "0;1", "0.1.a", "-1", "0x1", "1.", "GPU-1"] {
        let err = scope::Visible::parse_ze(bad).unwrap_err().to_string();
        assert!(err.contains('\''), "{bad}: {err}");
    }
}

#[test]
fn a_local_rank_past_the_devices_keeps_them_all() {
    let tree = Tree::of("two-amd-gpus-with-kfd");
    let scope = DrmScope {
        position: Some(5),
        ..DrmScope::default()
    };
    let source = DrmSource::open(&tree.roots(), &scope, 0).unwrap();
    assert_eq!(source.devices().len(), 2);
}

#[test]
fn thousands_of_fds_with_two_clients_among_them_give_exactly_their_memory() {
    let tree = Tree::of("two-clients-one-process");
    let fd = tree.path("proc/self/fd");
    std::fs::create_dir_all(&fd).unwrap();
    for entry in std::fs::read_dir(tree.path("proc/self/fdinfo")).unwrap() {
        let name = entry.unwrap().file_name();
        std::os::unix::fs::symlink("/dev/dri/renderD128", fd.join(&name)).unwrap();
    }
    for n in 100..5100 {
        std::os::unix::fs::symlink(format!("socket:[{n}]"), fd.join(n.to_string())).unwrap();
    }
    assert_eq!(read(&mut tree.open())[0].process_used, Some(4 * GIB));
}

//! One DRM client's memory, from the text of a `/proc/<pid>/fdinfo/<fd>` file, as the
//! kernel's DRM client usage stats (Documentation/gpu/drm-usage-stats.rst) lay it out.
//!
//! Keys are `drm-driver`, `drm-pdev`, `drm-client-id`, and memory as
//! `drm-resident-<region>`, or amdgpu's older `drm-memory-<region>`; values are whole
//! numbers with no unit (bytes), `KiB` or `MiB`. A line that does not follow the format is
//! skipped: the rest of the file still counts. A memory line skipped (a value that is no
//! byte count or more than any device holds, a region named a second time) is kept, as
//! the file shows it, for the warning that names it.

/// What one fdinfo file says of its DRM client. Plain data; parsing never fails, a file
/// with no `drm-driver` key is not a DRM client and parses to `None`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Client {
    /// `drm-driver`: `amdgpu`, `xe`, `i915`, ...
    pub(crate) driver: String,
    /// `drm-pdev`: the PCI slot of the device (`0000:03:00.0`), when the driver gives it.
    pub(crate) pdev: Option<String>,
    /// `drm-client-id`: the same on every fd of one client (dup, fork).
    pub(crate) client_id: Option<u64>,
    /// `drm-resident-<region>`, in bytes, in the file's order.
    pub(crate) resident: Vec<(String, u64)>,
    /// amdgpu's older `drm-memory-<region>`, in bytes.
    pub(crate) legacy: Vec<(String, u64)>,
    /// The first memory line left out (see the module's documentation), as shown.
    pub(crate) malformed: Option<String>,
}

/// Where a memory region lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Place {
    /// On the device: `vram*` (amdgpu, xe), `local*` (i915).
    Device,
    /// Host memory the device reaches: `system*`, `gtt`, `stolen*`, `cpu`. Never GPU memory.
    Host,
    /// A region this crate does not know (a unified `memory`, for example): neither.
    Other,
}

/// Where `region` (the part after `drm-resident-`) lives.
pub(crate) fn place(region: &str) -> Place {
    if region.starts_with("vram") || region.starts_with("local") {
        Place::Device
    } else if region.starts_with("system")
        || region == "gtt"
        || region.starts_with("stolen")
        || region == "cpu"
    {
        Place::Host
    } else {
        Place::Other
    }
}

/// One client's memory, split by where it lives.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Split {
    /// Device memory; `None` when the client names no device region (an APU, for example).
    pub(crate) device: Option<u64>,
    /// Host memory behind the device; `None` when it names no host region.
    pub(crate) host: Option<u64>,
}

impl Client {
    /// The client's resident memory by place, from `drm-resident-*` when the file has any,
    /// else from `drm-memory-*`: the two key sets describe the same memory, so one figure
    /// never mixes them.
    pub(crate) fn split(&self) -> Split {
        let regions = if self.resident.is_empty() {
            &self.legacy
        } else {
            &self.resident
        };
        let mut split = Split::default();
        for (region, bytes) in regions {
            let slot = match place(region) {
                Place::Device => &mut split.device,
                Place::Host => &mut split.host,
                Place::Other => continue,
            };
            *slot = Some(slot.unwrap_or(0).saturating_add(*bytes));
        }
        split
    }
}

/// Parses one fdinfo file. `None` when it is not a DRM client's (no `drm-driver` line).
pub(crate) fn parse(text: &[u8]) -> Option<Client> {
    let mut client = Client::default();
    let mut driver = None;
    for raw in text.split(|&b| b == b'\n') {
        let memory = raw.starts_with(b"drm-resident-") || raw.starts_with(b"drm-memory-");
        let Some((key, value)) = std::str::from_utf8(raw)
            .ok()
            .and_then(|line| line.split_once(':'))
        else {
            if memory {
                client.left_out(raw);
            }
            continue;
        };
        let (key, value) = (key.trim(), value.trim());
        if key == "drm-driver" {
            if !value.is_empty() {
                driver = Some(value.to_owned());
            }
        } else if key == "drm-pdev" {
            if !value.is_empty() {
                client.pdev = Some(value.to_owned());
            }
        } else if key == "drm-client-id" {
            if let Ok(id) = value.parse() {
                client.client_id = Some(id);
            }
        } else if let Some(region) = key.strip_prefix("drm-resident-") {
            if !push(&mut client.resident, region, value) {
                client.left_out(raw);
            }
        } else if let Some(region) = key.strip_prefix("drm-memory-") {
            if !push(&mut client.legacy, region, value) {
                client.left_out(raw);
            }
        }
    }
    client.driver = driver?;
    Some(client)
}

/// Adds `region`'s figure to `regions`; `false` when the line is left out: no region, a
/// value that is no byte count, or a region already given (the kernel writes each once,
/// so which figure is right cannot be told; the first stays, and is not doubled).
fn push(regions: &mut Vec<(String, u64)>, region: &str, value: &str) -> bool {
    let Some(bytes) = bytes(value) else {
        return false;
    };
    if region.is_empty() || regions.iter().any(|(r, _)| r == region) {
        return false;
    }
    regions.push((region.to_owned(), bytes));
    true
}

impl Client {
    /// Keeps the first memory line left out, as the file shows it (at most 80 characters).
    fn left_out(&mut self, line: &[u8]) {
        if self.malformed.is_none() {
            let shown: String = String::from_utf8_lossy(line)
                .trim()
                .chars()
                .take(80)
                .collect();
            self.malformed = Some(shown);
        }
    }
}

/// `1234`, `1234 KiB` or `1234 MiB` in bytes; `None` for anything else, or for more than
/// any device holds ([`MOST_BYTES`](super::files::MOST_BYTES)).
fn bytes(value: &str) -> Option<u64> {
    let mut parts = value.split_whitespace();
    let number = parts.next()?;
    if !number.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let number: u64 = number.parse().ok()?;
    let scale = match parts.next() {
        None => 1,
        Some("KiB") => 1 << 10,
        Some("MiB") => 1 << 20,
        Some(_) => return None,
    };
    if parts.next().is_some() {
        return None;
    }
    number
        .checked_mul(scale)
        .filter(|bytes| *bytes <= super::files::MOST_BYTES)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    #[test]
    fn bytes_kib_and_mib_are_bytes() {
        let client = parse(
            b"pos:\t0\nflags:\t02100002\ndrm-driver:\txe\ndrm-client-id:\t7\n\
              drm-resident-vram0:\t4096\ndrm-resident-vram1:\t3 KiB\ndrm-resident-gtt:\t2 MiB\n",
        )
        .unwrap();
        assert_eq!(client.driver, "xe");
        assert_eq!(client.client_id, Some(7));
        assert_eq!(
            client.split(),
            Split {
                device: Some(4096 + 3 * 1024),
                host: Some(2 * MIB),
            }
        );
    }

    #[test]
    fn resident_keys_win_over_the_older_amdgpu_keys_never_mixed() {
        let both = parse(
            b"drm-driver:\tamdgpu\ndrm-pdev:\t0000:03:00.0\ndrm-client-id:\t12\n\
              drm-memory-vram:\t1024 KiB\ndrm-memory-gtt:\t512 KiB\ndrm-memory-cpu:\t0 KiB\n\
              drm-resident-vram:\t2048 KiB\ndrm-resident-gtt:\t512 KiB\n",
        )
        .unwrap();
        assert_eq!(both.split().device, Some(2048 * 1024));
        let old =
            parse(b"drm-driver:\tamdgpu\ndrm-memory-vram:\t1024 KiB\ndrm-memory-gtt:\t512 KiB\n")
                .unwrap();
        assert_eq!(
            old.split(),
            Split {
                device: Some(1024 * 1024),
                host: Some(512 * 1024)
            }
        );
    }

    #[test]
    fn i915_local_is_device_memory_and_system_and_stolen_are_host_memory() {
        let client = parse(
            b"drm-driver:\ti915\ndrm-pdev:\t0000:4d:00.0\ndrm-client-id:\t3\n\
              drm-resident-system0:\t8 MiB\ndrm-resident-stolen-system0:\t0\n\
              drm-resident-local0:\t100 MiB\n",
        )
        .unwrap();
        assert_eq!(
            client.split(),
            Split {
                device: Some(100 * MIB),
                host: Some(8 * MIB)
            }
        );
    }

    #[test]
    fn a_client_without_device_regions_has_no_device_figure_rather_than_zero() {
        let apu = parse(b"drm-driver:\tamdgpu\ndrm-resident-gtt:\t64 MiB\n").unwrap();
        assert_eq!(apu.split().device, None);
        assert_eq!(apu.split().host, Some(64 * MIB));
    }

    #[test]
    fn malformed_lines_are_skipped_and_the_rest_counts() {
        let client = parse(
            b"drm-driver:\tamdgpu\ndrm-resident-vram:\tlots\ndrm-resident-vram:\t5 GiB\n\
              drm-resident-vram:\t-3\ndrm-resident-:\t7\nno colon here\n\xff\xfe:\x01\n\
              drm-resident-vram:\t99999999999999999999 MiB\ndrm-client-id:\tx\n\
              drm-resident-vram:\t1 MiB\n",
        )
        .unwrap();
        assert_eq!(client.client_id, None);
        assert_eq!(client.split().device, Some(MIB));
    }

    #[test]
    fn a_file_without_drm_driver_is_not_a_drm_client() {
        assert_eq!(parse(b"pos:\t0\nflags:\t02\nmnt_id:\t15\n"), None);
        assert_eq!(parse(b""), None);
    }

    proptest::proptest! {
        #[test]
        fn any_bytes_parse_without_panic(text in proptest::collection::vec(proptest::num::u8::ANY, 0..512)) {
            if let Some(client) = parse(&text) {
                let _ = client.split();
            }
        }

        #[test]
        fn any_lines_of_drm_keys_parse_without_panic(
            lines in proptest::collection::vec("(drm-(driver|pdev|client-id|resident-vram0|memory-gtt|resident-local0)|[a-z-]{0,12}):[ \t]{0,2}[0-9A-Za-z :.]{0,24}", 0..24)
        ) {
            let text = lines.join("\n");
            if let Some(client) = parse(text.as_bytes()) {
                let split = client.split();
                // Device memory is only ever device regions' sum.
                if split.device.is_some() {
                    proptest::prop_assert!(client.resident.iter().chain(&client.legacy).any(|(r, _)| place(r) == Place::Device));
                }
            }
        }
    }
}

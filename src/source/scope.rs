//! Which devices are in scope: `GPUSPAN_DEVICES`, else `CUDA_VISIBLE_DEVICES`, else all.

use super::Device;

/// An entry of a device list that names no device.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("'{entry}' is neither a device index (0, 1, ...) nor a UUID (GPU-... or MIG-...)")]
#[non_exhaustive]
pub struct DeviceScopeError {
    /// The entry, as written.
    pub entry: String,
}

/// A UUID prefix in a device list that starts more than one device's UUID: which device
/// it means cannot be told, so no device is taken for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AmbiguousDevice {
    /// The entry, with its `GPU-`/`MIG-` in upper case.
    pub(crate) entry: String,
    /// The UUIDs it starts, in the devices' order.
    pub(crate) candidates: Vec<String>,
}

impl std::fmt::Display for AmbiguousDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "a UUID prefix that names one device; '{}' starts {} devices' UUIDs ({}): give \
             enough of the UUID to name one",
            self.entry,
            self.candidates.len(),
            self.candidates.join(", ")
        )
    }
}

/// `prefix` (in lower case), when it starts the UUIDs of more than one of `uuids`.
pub(crate) fn ambiguous<'a>(
    prefix: &str,
    uuids: impl IntoIterator<Item = &'a str>,
) -> Option<AmbiguousDevice> {
    let mut candidates: Vec<String> = Vec::new();
    for uuid in uuids {
        if uuid.to_ascii_lowercase().starts_with(prefix) && !candidates.iter().any(|c| c == uuid) {
            candidates.push(uuid.to_owned());
        }
    }
    (candidates.len() > 1).then(|| AmbiguousDevice {
        entry: upper_prefix(prefix),
        candidates,
    })
}

/// A UUID kept in lower case, with its `GPU-`/`MIG-` as written.
pub(crate) fn upper_prefix(uuid: &str) -> String {
    match uuid.get(..4) {
        Some(head) => format!("{}{}", head.to_ascii_uppercase(), &uuid[4..]),
        None => uuid.to_owned(),
    }
}

/// The devices a run measures, by NVML index or by UUID.
///
/// NVML ignores `CUDA_VISIBLE_DEVICES`, so gpuspan applies it itself: `GPU-...` entries match
/// by UUID (a prefix is enough, as with CUDA), numbers match the NVML index, which is CUDA's
/// numbering when `CUDA_DEVICE_ORDER=PCI_BUS_ID` (prefer UUIDs otherwise). On a GPU in MIG
/// mode, a `MIG-...` UUID selects one instance, and the GPU's index or UUID all of them.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DeviceScope {
    /// `None`: every device.
    entries: Option<Vec<DeviceId>>,
    /// The one device of those in scope, by position, that a rank uses (`LOCAL_RANK`);
    /// `None`, or a position past the last, keeps them all.
    position: Option<usize>,
}

/// One entry of a runtime's list of visible devices.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ListEntry<N> {
    /// A number: an index, or a position in the list the runtime narrows.
    Number(N),
    /// A `GPU-...` or `MIG-...` UUID or prefix of one, in lower case.
    Uuid(String),
}

type DeviceId = ListEntry<u32>;

/// Parses a comma-separated list of numbers and `GPU-...` or `MIG-...` UUIDs, as CUDA, HIP
/// and ROCr read theirs: empty entries are passed over and `-1` ends the list.
pub(crate) fn parse_list<N: std::str::FromStr>(
    list: &str,
) -> Result<Vec<ListEntry<N>>, DeviceScopeError> {
    let mut entries = Vec::new();
    for raw in list.split(',') {
        let entry = raw.trim();
        if entry.is_empty() {
            continue;
        }
        if entry == "-1" {
            break;
        }
        if let Ok(number) = entry.parse() {
            entries.push(ListEntry::Number(number));
        } else if entry.starts_with("GPU-") || entry.starts_with("MIG-") {
            entries.push(ListEntry::Uuid(entry.to_ascii_lowercase()));
        } else {
            return Err(DeviceScopeError {
                entry: entry.to_owned(),
            });
        }
    }
    Ok(entries)
}

impl DeviceScope {
    /// Every device the source sees.
    pub fn all() -> Self {
        Self {
            entries: None,
            position: None,
        }
    }

    /// Of the devices in this scope, only the one at `position`, as CUDA numbers the
    /// devices it sees: the device of the rank with `LOCAL_RANK = position`. A listed scope
    /// (`CUDA_VISIBLE_DEVICES`) keeps its `position`-th entry; every device keeps the one at
    /// that position in NVML's order. When there is no device at that position (ranks
    /// sharing devices), the scope stays as it was.
    pub fn at_position(mut self, position: usize) -> Self {
        match &mut self.entries {
            Some(entries) if position < entries.len() => {
                let entry = entries.swap_remove(position);
                *entries = vec![entry];
            }
            Some(_) => {}
            None => self.position = Some(position),
        }
        self
    }

    /// Narrows `devices` (those in scope, in order) to the one at the scope's position.
    pub(crate) fn pick<T>(&self, mut devices: Vec<T>) -> Vec<T> {
        match self.position {
            Some(position) if position < devices.len() => vec![devices.swap_remove(position)],
            _ => devices,
        }
    }

    /// Parses a comma-separated list of NVML indexes and `GPU-...` or `MIG-...` UUIDs.
    ///
    /// An empty list or `-1` selects no device, as `CUDA_VISIBLE_DEVICES` does.
    ///
    /// # Errors
    /// An entry that is neither a number nor a `GPU-`/`MIG-` identifier.
    pub fn parse(list: &str) -> Result<Self, DeviceScopeError> {
        let entries = parse_list(list)?;
        Ok(Self {
            entries: Some(entries),
            position: None,
        })
    }

    /// The entry at `position` of the list, as a list of one entry would name it (`None`
    /// for every device, or past the last entry).
    pub(crate) fn entry(&self, position: usize) -> Option<String> {
        match self.entries.as_ref()?.get(position)? {
            DeviceId::Number(index) => Some(index.to_string()),
            // Kept in lower case; the prefix is read in upper case.
            DeviceId::Uuid(uuid) => Some(upper_prefix(uuid)),
        }
    }

    /// The first UUID prefix of the list that starts more than one of `devices`' UUIDs.
    pub(crate) fn ambiguity(&self, devices: &[Device]) -> Option<AmbiguousDevice> {
        self.entries.as_ref()?.iter().find_map(|entry| match entry {
            DeviceId::Uuid(prefix) => ambiguous(prefix, devices.iter().map(|d| d.uuid.as_str())),
            DeviceId::Number(_) => None,
        })
    }

    /// Whether `device` is in scope.
    pub fn includes(&self, device: &Device) -> bool {
        let Some(entries) = &self.entries else {
            return true;
        };
        let uuid = device.uuid.to_ascii_lowercase();
        entries.iter().any(|entry| match entry {
            DeviceId::Number(index) => *index == device.index,
            DeviceId::Uuid(prefix) => uuid.starts_with(prefix.as_str()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn device(index: u32, uuid: &str) -> Device {
        Device {
            index,
            mig: None,
            uuid: uuid.into(),
            name: "test".into(),
            vendor: "NVIDIA".into(),
        }
    }

    #[test]
    fn indexes_and_uuid_prefixes_select_devices() {
        let scope = DeviceScope::parse("1, GPU-abcd").unwrap();
        assert!(!scope.includes(&device(0, "GPU-0000")));
        assert!(scope.includes(&device(1, "GPU-1111")));
        assert!(scope.includes(&device(2, "GPU-ABCD-1234")));
    }

    #[test]
    fn empty_and_minus_one_select_nothing() {
        assert!(!DeviceScope::parse("")
            .unwrap()
            .includes(&device(0, "GPU-0")));
        assert!(!DeviceScope::parse("-1")
            .unwrap()
            .includes(&device(0, "GPU-0")));
        assert!(DeviceScope::all().includes(&device(7, "GPU-7")));
    }

    #[test]
    fn a_rank_position_picks_one_device_of_the_scope_or_keeps_all() {
        let devices = || {
            (0..4)
                .map(|i| device(i, &format!("GPU-{i}")))
                .collect::<Vec<_>>()
        };
        let kept = |scope: &DeviceScope| -> Vec<u32> {
            let inside = devices()
                .into_iter()
                .filter(|d| scope.includes(d))
                .collect();
            scope.pick(inside).iter().map(|d| d.index).collect()
        };
        // CUDA's device 1 is the second entry of CUDA_VISIBLE_DEVICES, whatever its index.
        let visible = DeviceScope::parse("3,1,2").unwrap();
        assert_eq!(kept(&visible.clone().at_position(0)), vec![3]);
        assert_eq!(kept(&visible.clone().at_position(1)), vec![1]);
        assert_eq!(kept(&visible.clone().at_position(3)), vec![1, 2, 3]);
        assert_eq!(kept(&DeviceScope::all().at_position(2)), vec![2]);
        assert_eq!(kept(&DeviceScope::all().at_position(9)), vec![0, 1, 2, 3]);
    }

    #[test]
    fn a_prefix_of_several_uuids_is_ambiguous_and_a_full_one_is_not() {
        let devices = [
            device(0, "GPU-ab12"),
            device(1, "GPU-AB34"),
            device(2, "GPU-cd"),
        ];
        let ambiguous = DeviceScope::parse("GPU-AB").unwrap().ambiguity(&devices);
        assert_eq!(
            ambiguous,
            Some(AmbiguousDevice {
                entry: "GPU-ab".into(),
                candidates: vec!["GPU-ab12".into(), "GPU-AB34".into()],
            })
        );
        assert_eq!(
            DeviceScope::parse("GPU-ab1, 1")
                .unwrap()
                .ambiguity(&devices),
            None
        );
        assert_eq!(DeviceScope::all().ambiguity(&devices), None);
    }

    #[test]
    fn garbage_names_the_entry() {
        let err = DeviceScope::parse("0,cuda:1").unwrap_err().to_string();
        assert!(err.contains("'cuda:1'"), "{err}");
    }
}

//! The AMD and Intel GPUs under `<sysfs>/class/drm`: which driver, which PCI slot, what
//! name and identifier, and where their files are. Read once, when the source opens.

use std::path::{Path, PathBuf};

use super::files;
use super::kfd::KfdNode;

/// How a device's memory is read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Driver {
    /// amdgpu: `mem_info_vram_used` and `mem_info_vram_total` in sysfs.
    Amdgpu,
    /// xe: total from `tile<N>/physical_vram_size_bytes`, used summed from the clients'
    /// fdinfo (the driver gives the device's own figure only to privileged callers).
    Xe,
    /// i915: used summed from the clients' `local*` regions in fdinfo; no total.
    I915,
}

impl Driver {
    /// The driver that `name` (a `DRIVER=` or `drm-driver` value) names, if it is read here.
    pub(crate) fn from_name(name: &str) -> Option<Self> {
        match name {
            "amdgpu" => Some(Driver::Amdgpu),
            "xe" => Some(Driver::Xe),
            "i915" => Some(Driver::I915),
            _ => None,
        }
    }

    /// The vendor, recorded as `hw.vendor`.
    pub(crate) fn vendor(self) -> &'static str {
        match self {
            Driver::Amdgpu => "AMD",
            Driver::Xe | Driver::I915 => "Intel",
        }
    }

    /// What the device figure is read from, recorded as `gpu.memory.source`.
    pub(crate) fn source(self) -> &'static str {
        match self {
            Driver::Amdgpu => "amdgpu-sysfs",
            Driver::Xe | Driver::I915 => "drm-fdinfo",
        }
    }
}

/// One GPU under `class/drm`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Card {
    /// `N` of `cardN`.
    pub(crate) number: u32,
    /// The PCI device's own directory, where `<sysfs>/class/drm/cardN/device` leads: a
    /// device removed and back under another card number is read there again, and a card
    /// number another device takes meanwhile never gives that device's figures.
    pub(crate) dir: PathBuf,
    /// `<sysfs>/class/drm/cardN` as found when the source opened (i915 keeps its GTs'
    /// files there, not in the PCI device's directory).
    pub(crate) drm_dir: PathBuf,
    pub(crate) driver: Driver,
    /// The PCI slot (`PCI_SLOT_NAME`), as fdinfo's `drm-pdev` names it.
    pub(crate) pdev: String,
    /// `hw.id`: `GPU-<unique_id>` where amdgpu gives one, else the PCI slot.
    pub(crate) uuid: String,
    pub(crate) name: String,
    /// Installed device memory, when it is fixed and readable once (xe's tiles).
    pub(crate) fixed_total: Option<u64>,
    /// The device's KFD node (ROCm's view), when KFD lists it.
    pub(crate) kfd: Option<KfdNode>,
    /// For one compute partition of a GPU (an MI300X in CPX mode, say), its position among
    /// the GPU's partitions: each partition is a device of its own, read through KFD.
    pub(crate) partition: Option<u32>,
}

impl Card {
    /// What the device figure is read from, recorded as `gpu.memory.source`.
    pub(crate) fn source(&self) -> &'static str {
        if self.partition.is_some() {
            "kfd"
        } else {
            self.driver.source()
        }
    }

    /// A GPU that KFD lists as several nodes: one card per partition.
    fn partitions(self, nodes: &[KfdNode]) -> Vec<Card> {
        let mine: Vec<&KfdNode> = nodes.iter().filter(|n| n.pdev == self.pdev).collect();
        if self.driver != Driver::Amdgpu || mine.len() < 2 {
            return vec![self];
        }
        // A kernel that gives every partition the GPU's own unique_id leaves it no use for
        // telling them apart: `hw.id` is then the slot and the partition, one per device.
        let own_id = |node: &KfdNode| {
            node.unique_id
                .filter(|id| mine.iter().filter(|n| n.unique_id == Some(*id)).count() == 1)
        };
        let ids: Vec<Option<u64>> = mine.iter().map(|node| own_id(node)).collect();
        mine.into_iter()
            .zip(ids)
            .zip(0u32..)
            .map(|((node, id), partition)| Card {
                uuid: match id {
                    Some(id) => format!("GPU-{id:016x}"),
                    None => format!("{}-partition{partition}", self.pdev),
                },
                name: format!("{} partition {partition}", self.name),
                kfd: Some(node.clone()),
                partition: Some(partition),
                ..self.clone()
            })
            .collect()
    }
}

/// Lists the AMD and Intel GPUs under `<sysfs>/class/drm`, AMD's in KFD's order (the
/// order ROCm numbers them in) then by card number. Other drivers' cards (NVIDIA's,
/// display-only ones) and connectors (`card0-DP-1`) are passed over.
pub(crate) fn discover(sysfs: &Path, kfd: &[KfdNode]) -> Vec<Card> {
    let class = sysfs.join("class/drm");
    let Ok(entries) = std::fs::read_dir(&class) else {
        return Vec::new();
    };
    let mut cards: Vec<Card> = entries
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let name = entry.file_name();
            let number = name.to_str()?.strip_prefix("card")?.parse().ok()?;
            card(number, &class.join(&name).join("device"), kfd)
        })
        .flat_map(|card| card.partitions(kfd))
        .collect();
    cards.sort_by_key(|card| {
        (
            card.driver != Driver::Amdgpu,
            card.kfd.as_ref().map_or(u32::MAX, |node| node.node),
            card.number,
        )
    });
    // One PCI device may have several DRM minors listed as cards: keep it (or each of its
    // partitions) once.
    let mut seen = std::collections::HashSet::new();
    cards.retain(|card| seen.insert((card.pdev.clone(), card.partition)));
    cards
}

fn card(number: u32, dir: &Path, kfd: &[KfdNode]) -> Option<Card> {
    let uevent = files::read_text(&dir.join("uevent")).ok()?;
    let driver = Driver::from_name(&files::uevent_value(&uevent, "DRIVER")?)?;
    let pdev = files::uevent_value(&uevent, "PCI_SLOT_NAME")?;
    let pci_id = files::uevent_value(&uevent, "PCI_ID").unwrap_or_default();
    let uuid = match files::text(&dir.join("unique_id")) {
        Some(id) if driver == Driver::Amdgpu => format!("GPU-{id}"),
        _ => pdev.clone(),
    };
    let name = files::text(&dir.join("product_name")).unwrap_or_else(|| {
        format!("{} GPU {pci_id}", driver.vendor())
            .trim_end()
            .to_owned()
    });
    let fixed_total = match driver {
        Driver::Xe => tiles_vram(dir),
        Driver::Amdgpu | Driver::I915 => None,
    };
    Some(Card {
        number,
        dir: std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf()),
        drm_dir: dir.parent().unwrap_or(dir).to_path_buf(),
        driver,
        uuid,
        name,
        fixed_total,
        kfd: kfd.iter().find(|node| node.pdev == pdev).cloned(),
        partition: None,
        pdev,
    })
}

/// The sum of `tile<N>/physical_vram_size_bytes`; `None` when no tile has one (an
/// integrated GPU).
fn tiles_vram(dir: &Path) -> Option<u64> {
    let mut buf = Vec::new();
    let mut total = None;
    for entry in std::fs::read_dir(dir).ok()?.filter_map(Result::ok) {
        let name = entry.file_name();
        let is_tile = name
            .to_str()
            .and_then(|n| n.strip_prefix("tile"))
            .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
        if !is_tile {
            continue;
        }
        if let Ok(bytes) = files::bytes(&entry.path().join("physical_vram_size_bytes"), &mut buf) {
            total = Some(total.unwrap_or(0u64).saturating_add(bytes));
        }
    }
    total
}

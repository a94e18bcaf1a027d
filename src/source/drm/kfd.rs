//! ROCm's view through KFD (`<sysfs>/class/kfd/kfd`): each GPU node's `gpu_id` and PCI
//! slot, and a compute process's device memory in `proc/<pid>/vram_<gpu_id>`.

use std::path::{Path, PathBuf};

use super::files;

/// A GPU node of KFD's topology.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct KfdNode {
    /// `N` of `topology/nodes/N`.
    pub(crate) node: u32,
    /// `topology/nodes/N/gpu_id`, the suffix of `vram_<gpu_id>`.
    pub(crate) gpu_id: u64,
    /// The PCI slot, from `properties`' `domain` and `location_id`.
    pub(crate) pdev: String,
}

/// The GPU nodes (CPU nodes have `gpu_id` 0), in node order; empty without KFD.
pub(crate) fn nodes(sysfs: &Path) -> Vec<KfdNode> {
    let dir = sysfs.join("class/kfd/kfd/topology/nodes");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut buf = Vec::new();
    let mut nodes: Vec<KfdNode> = entries
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let node = entry.file_name().to_str()?.parse().ok()?;
            let gpu_id = files::number(&entry.path().join("gpu_id"), &mut buf).ok()?;
            if gpu_id == 0 {
                return None;
            }
            let properties = std::fs::read_to_string(entry.path().join("properties")).ok()?;
            let location = files::property(&properties, "location_id")?;
            let domain = files::property(&properties, "domain").unwrap_or(0);
            Some(KfdNode {
                node,
                gpu_id,
                pdev: pci_slot(domain, location),
            })
        })
        .collect();
    nodes.sort_by_key(|n| n.node);
    nodes
}

/// `location_id` is the bus, device and function as `bus << 8 | device << 3 | function`.
fn pci_slot(domain: u64, location: u64) -> String {
    let bus = (location >> 8) & 0xff;
    let devfn = location & 0xff;
    format!("{domain:04x}:{bus:02x}:{:02x}.{}", devfn >> 3, devfn & 7)
}

/// `<sysfs>/class/kfd/kfd/proc/<pid>/vram_<gpu_id>`: what a ROCm process holds on the node.
pub(crate) fn process_vram(sysfs: &Path, pid: u32, gpu_id: u64) -> PathBuf {
    sysfs.join(format!("class/kfd/kfd/proc/{pid}/vram_{gpu_id}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn location_id_is_the_pci_slot() {
        assert_eq!(pci_slot(0, 0x0300), "0000:03:00.0");
        assert_eq!(pci_slot(1, (0xc1 << 8) | (2 << 3) | 1), "0001:c1:02.1");
    }
}

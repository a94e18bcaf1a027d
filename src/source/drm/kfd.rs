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
    /// `properties`' `unique_id`, where the kernel gives one (each partition its own).
    pub(crate) unique_id: Option<u64>,
    /// The node's memory: the sum of `mem_banks/*/properties`' `size_in_bytes`.
    pub(crate) memory: Option<u64>,
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
            let properties = files::read_text(&entry.path().join("properties")).ok()?;
            let location = files::property(&properties, "location_id")?;
            let domain = files::property(&properties, "domain").unwrap_or(0);
            Some(KfdNode {
                node,
                gpu_id,
                pdev: pci_slot(domain, location),
                unique_id: files::property(&properties, "unique_id").filter(|id| *id != 0),
                memory: banks(&entry.path().join("mem_banks")),
            })
        })
        .collect();
    nodes.sort_by_key(|n| n.node);
    nodes
}

/// The sum of the memory banks' sizes; `None` without any.
fn banks(dir: &Path) -> Option<u64> {
    let mut total = None;
    for entry in std::fs::read_dir(dir).ok()?.filter_map(Result::ok) {
        let Ok(properties) = files::read_text(&entry.path().join("properties")) else {
            continue;
        };
        let size = files::property(&properties, "size_in_bytes");
        if let Some(size) = size.filter(|size| *size <= files::MOST_BYTES) {
            total = Some(total.unwrap_or(0u64).saturating_add(size));
        }
    }
    total
}

/// Every KFD process's device memory per `gpu_id`: what the compute partitions of one GPU
/// hold each. Processes whose files cannot be read are left out and named in `denied`.
pub(crate) fn vram_by_gpu(sysfs: &Path, buf: &mut Vec<u8>) -> (Vec<(u64, u64)>, Option<PathBuf>) {
    let mut sums: Vec<(u64, u64)> = Vec::new();
    let mut denied = None;
    let Ok(processes) = std::fs::read_dir(sysfs.join("class/kfd/kfd/proc")) else {
        return (sums, denied);
    };
    for process in processes.filter_map(Result::ok) {
        let Ok(files) = std::fs::read_dir(process.path()) else {
            continue;
        };
        for file in files.filter_map(Result::ok) {
            let name = file.file_name();
            let Some(gpu_id) = name
                .to_str()
                .and_then(|n| n.strip_prefix("vram_"))
                .and_then(|id| id.parse::<u64>().ok())
            else {
                continue;
            };
            match files::bytes(&file.path(), buf) {
                Ok(bytes) => match sums.iter_mut().find(|(id, _)| *id == gpu_id) {
                    Some((_, sum)) => *sum = sum.saturating_add(bytes),
                    None => sums.push((gpu_id, bytes)),
                },
                Err(files::Missing::Denied) => denied = denied.or(Some(file.path())),
                Err(_) => {}
            }
        }
    }
    (sums, denied)
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

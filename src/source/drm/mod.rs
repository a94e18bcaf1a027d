//! AMD and Intel GPUs from the kernel's own files, with no vendor library.
//!
//! - Device memory: amdgpu's `mem_info_vram_used`/`mem_info_vram_total` in sysfs; for xe
//!   and i915, the sum of every readable process's device regions in fdinfo (`vram*`,
//!   `local*`), with xe's total from `tile<N>/physical_vram_size_bytes`.
//! - This process's memory: its own `<procfs>/<pid>/fdinfo` (a few small reads, no driver
//!   lock, so it keeps the memory cadence), or KFD's `vram_<gpu_id>` for a ROCm process.
//! - Host memory behind a device (`gtt`, `system*`, `stolen*`) is never GPU memory.
//! - Energy and power: the card's hwmon files (`hwmon`); the clock throttle reasons and
//!   graphics clock (`throttle`: Intel's files, amdgpu's `gpu_metrics` table); at the
//!   sampler's power cadence.
//!
//! Every path is under the sysfs and procfs roots given, so tests run on written trees.

#[cfg(feature = "__bench")]
#[doc(hidden)]
pub use clients::__private;

pub(crate) mod cards;
mod clients;
mod fdinfo;
mod files;
mod gpu_metrics;
mod hwmon;
mod kfd;
pub(crate) mod scope;
mod throttle;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::scope::AmbiguousDevice;
use super::{Device, DeviceReading, MemorySource, PowerReading};
use cards::{Card, Driver};
use clients::{Clients, Notice, Whose};
use files::Missing;
pub(crate) use scope::DrmScope;

/// Where the kernel's files are (`/sys` and `/proc` unless the settings say otherwise).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Roots {
    pub(crate) sysfs: PathBuf,
    pub(crate) procfs: PathBuf,
}

/// How often `gpu_busy_percent` is read: the driver averages it over its own period.
const UTILIZATION_EVERY: Duration = Duration::from_millis(100);

/// Reads AMD and Intel GPUs through sysfs, fdinfo and KFD.
#[derive(Debug)]
pub(crate) struct DrmSource {
    sysfs: PathBuf,
    cards: Vec<Card>,
    devices: Vec<Device>,
    name: String,
    pid: u32,
    clients: Clients,
    utilization: Vec<Option<f64>>,
    utilization_read: Option<Instant>,
    utilization_time: Option<Duration>,
    buf: Vec<u8>,
    /// Whether the line about another user's KFD files was said.
    told_kfd_denied: bool,
    /// Per card, its energy and power files; `None` where it has none, or where an
    /// earlier card of the list is the same GPU (another partition), so that a GPU is
    /// counted once.
    hwmon: Vec<Option<hwmon::Hwmon>>,
    /// Per card, its clock throttle files, where its driver has them.
    throttle: Vec<Option<throttle::Throttle>>,
    /// `gpu.energy.scope`: `socket` when a card is an APU, `gpu` when a card is one
    /// partition of a GPU (the figure is the whole GPU's).
    energy_scope: Option<&'static str>,
}

/// Why no AMD or Intel device is read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum NoDrmDevice {
    /// None is there or in scope, in words.
    Absent(String),
    /// A UUID prefix in scope starts several devices' UUIDs.
    Ambiguous(AmbiguousDevice),
}

impl std::fmt::Display for NoDrmDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Absent(why) => f.write_str(why),
            Self::Ambiguous(ambiguous) => write!(f, "expected {ambiguous}"),
        }
    }
}

impl DrmSource {
    /// Opens the AMD and Intel GPUs in `scope` under `roots`, numbering them from
    /// `first_index` (after the NVIDIA devices NVML reads).
    pub(crate) fn open(
        roots: &Roots,
        scope: &DrmScope,
        first_index: u32,
    ) -> Result<Self, NoDrmDevice> {
        let class = roots.sysfs.join("class/drm");
        let nodes = kfd::nodes(&roots.sysfs);
        let found = cards::discover(&roots.sysfs, &nodes);
        if found.is_empty() {
            return Err(NoDrmDevice::Absent(format!(
                "no AMD or Intel GPU under {} (no amdgpu, xe or i915 card)",
                class.display()
            )));
        }
        let (amd, intel): (Vec<Card>, Vec<Card>) = found
            .into_iter()
            .partition(|card| card.driver == Driver::Amdgpu);
        if let Some(ambiguous) = scope.ambiguity(&amd, &intel, first_index, describe) {
            return Err(NoDrmDevice::Ambiguous(ambiguous));
        }
        let picked = scope.select(amd, intel, first_index, describe);
        if picked.is_empty() {
            return Err(NoDrmDevice::Absent(format!(
                "no AMD or Intel GPU under {} is in scope (ROCR_VISIBLE_DEVICES, \
                 HIP_VISIBLE_DEVICES, CUDA_VISIBLE_DEVICES, ZE_AFFINITY_MASK or \
                 GPUSPAN_DEVICES leave none)",
                class.display()
            )));
        }
        let (cards, devices): (Vec<Card>, Vec<Device>) = picked.into_iter().unzip();
        let mut sources: Vec<&str> = Vec::new();
        for card in &cards {
            if !sources.contains(&card.source()) {
                sources.push(card.source());
            }
        }
        let whose = if cards.iter().any(|c| c.driver != Driver::Amdgpu) {
            Whose::All
        } else {
            Whose::Own
        };
        let pid = std::process::id();
        let hwmon = open_hwmon(&cards);
        let throttle = cards.iter().map(throttle::Throttle::open).collect();
        let energy_scope = energy_scope(&cards, &hwmon);
        Ok(Self {
            sysfs: roots.sysfs.clone(),
            name: sources.join("+"),
            utilization: vec![None; cards.len()],
            cards,
            devices,
            pid,
            clients: Clients::new(&roots.procfs, pid, whose),
            utilization_read: None,
            utilization_time: None,
            buf: Vec::with_capacity(64),
            told_kfd_denied: false,
            throttle,
            hwmon,
            energy_scope,
        })
    }

    fn read_utilization(&mut self, now: Instant) {
        if self
            .utilization_read
            .is_some_and(|last| now.duration_since(last) < UTILIZATION_EVERY)
        {
            self.utilization_time = None;
            return;
        }
        self.utilization_read = Some(now);
        let started = Instant::now();
        for (i, card) in self.cards.iter().enumerate() {
            self.utilization[i] = match card.driver {
                // The busy figure is the whole GPU's, not one partition's.
                Driver::Amdgpu if card.partition.is_some() => None,
                Driver::Amdgpu => files::number(&card.dir.join("gpu_busy_percent"), &mut self.buf)
                    .ok()
                    .map(|percent| percent.min(100) as f64 / 100.0),
                Driver::Xe | Driver::I915 => None,
            };
        }
        self.utilization_time = Some(started.elapsed());
    }

    fn tell(&self, notice: Notice) {
        eprintln!("gpuspan: warning: {}", warning(notice));
    }
}

/// What a notice tells the user, in one line.
fn warning(notice: Notice) -> String {
    match notice {
        Notice::Denied(path) => format!(
            "{} cannot be read (permission denied): the device memory of Intel GPUs is \
             summed over the processes this user can read, so another user's share is \
             not in it; run as that user, or as root, to count every process",
            path.display()
        ),
        Notice::Unreadable(why) => format!(
            "{why}: this process's GPU memory (gpu.process.memory.*) is not measured \
             while it cannot be read"
        ),
        Notice::NoDeviceRegion(path) => format!(
            "{} names no device-memory region (drm-resident-vram*, local*): the GPU \
             shares the host's memory (an APU or integrated GPU), so this process's GPU \
             memory is not measured; its host memory is in process.memory.*",
            path.display()
        ),
        Notice::Malformed { path, line } => format!(
            "{} has a memory line no kernel writes ('{line}': not bytes, KiB or MiB, more \
             than any device holds, or a region given a second time); that line is left \
             out of the GPU memory read there",
            path.display()
        ),
        Notice::NoDevice(path) => format!(
            "{} is a client of an AMD or Intel GPU that names no device (no drm-pdev): \
             this process's GPU memory (gpu.process.memory.*) is not measured while it \
             cannot be told which device holds it",
            path.display()
        ),
        Notice::Left(why) => format!(
            "{why}: the device memory of Intel GPUs is summed over the processes whose \
             files can be read, so that process's share is not in it"
        ),
    }
}

/// The `hw.id` of the AMD GPU that HIP numbers `ordinal` when `lists` (ROCr's, then
/// HIP's) narrow the AMD GPUs under `sysfs`, in ROCm's order; `None` when there is none.
pub(crate) fn hip_device_id(
    sysfs: &Path,
    lists: &[scope::Visible],
    ordinal: usize,
) -> Option<String> {
    let amd: Vec<Card> = cards::discover(sysfs, &kfd::nodes(sysfs))
        .into_iter()
        .filter(|card| card.driver == Driver::Amdgpu)
        .collect();
    let scope = DrmScope {
        amd: lists.to_vec(),
        ..DrmScope::default()
    };
    scope
        .select(amd, Vec::new(), 0, describe)
        .into_iter()
        .nth(ordinal)
        .map(|(_, device)| device.uuid)
}

/// A card as `gpu.index`, `hw.id`, `hw.name` and `hw.vendor` name it.
fn describe(card: &Card, index: u32) -> Device {
    Device {
        index,
        mig: None,
        uuid: card.uuid.clone(),
        name: card.name.clone(),
        vendor: card.driver.vendor().to_owned(),
    }
}

impl MemorySource for DrmSource {
    fn name(&self) -> &str {
        &self.name
    }

    fn devices(&self) -> &[Device] {
        &self.devices
    }

    fn read(&mut self, out: &mut [DeviceReading]) {
        let now = Instant::now();
        let usage = self.clients.read(now);
        for notice in self.clients.take_notices() {
            self.tell(notice);
        }
        self.read_utilization(now);
        let partitions = if self.cards.iter().any(|c| c.partition.is_some()) {
            let (sums, denied) = kfd::vram_by_gpu(&self.sysfs, &mut self.buf);
            if let Some(path) = denied {
                if !self.told_kfd_denied {
                    self.told_kfd_denied = true;
                    eprintln!(
                        "gpuspan: warning: {} cannot be read (permission denied): a GPU \
                         partition's memory is summed over the ROCm processes this user can \
                         read, so that process's share is not in it",
                        path.display()
                    );
                }
            }
            sums
        } else {
            Vec::new()
        };
        for (i, reading) in out.iter_mut().enumerate().take(self.cards.len()) {
            let card = &self.cards[i];
            match (card.driver, &card.partition, &card.kfd) {
                (Driver::Amdgpu, Some(_), Some(node)) => {
                    if let Some(error) = gone(card) {
                        reading.error = Some(error);
                        continue;
                    }
                    // A partition's memory is what the ROCm processes hold on it.
                    reading.used = Some(
                        partitions
                            .iter()
                            .find(|(id, _)| *id == node.gpu_id)
                            .map_or(0, |(_, sum)| *sum),
                    );
                    reading.total = node.memory;
                    let mine = kfd::process_vram(&self.sysfs, self.pid, node.gpu_id);
                    reading.process_used = match files::bytes(&mine, &mut self.buf) {
                        Ok(bytes) => Some(bytes),
                        Err(Missing::Absent) => Some(0),
                        Err(_) => None,
                    };
                }
                (Driver::Amdgpu, _, _) => {
                    let used_path = card.dir.join("mem_info_vram_used");
                    match files::bytes(&used_path, &mut self.buf) {
                        Ok(used) => reading.used = Some(used),
                        Err(why) => {
                            reading.error = Some(lost(&why, &used_path));
                            continue;
                        }
                    }
                    reading.total =
                        files::bytes(&card.dir.join("mem_info_vram_total"), &mut self.buf).ok();
                    reading.utilization = self.utilization[i];
                    let kfd = card.kfd.as_ref().and_then(|node| {
                        let path = kfd::process_vram(&self.sysfs, self.pid, node.gpu_id);
                        files::bytes(&path, &mut self.buf).ok()
                    });
                    reading.process_used = kfd.or_else(|| usage.own_device(&card.pdev));
                }
                (Driver::Xe | Driver::I915, _, _) => {
                    if let Some(error) = gone(card) {
                        reading.error = Some(error);
                        continue;
                    }
                    reading.used = usage.all_device(&card.pdev).or_else(|| {
                        // No client holds device memory there: the sum is zero, on a
                        // device that has some.
                        let clients = usage.all.iter().any(|u| u.pdev == card.pdev);
                        (!clients && card.fixed_total.is_some()).then_some(0)
                    });
                    reading.total = card.fixed_total;
                    reading.process_used = usage.own_device(&card.pdev);
                }
            }
        }
    }

    fn read_power(&mut self, out: &mut [PowerReading]) {
        let now = Instant::now();
        let cards = self.hwmon.iter_mut().zip(&mut self.throttle);
        for (reading, (hwmon, throttle)) in out.iter_mut().zip(cards) {
            if let Some(hwmon) = hwmon {
                hwmon.read(now, &mut self.buf, reading);
            }
            if let Some(throttle) = throttle {
                throttle.read(&mut self.buf, reading);
            }
        }
    }

    fn energy_scope(&self) -> Option<&'static str> {
        self.energy_scope
    }

    fn take_utilization_time(&mut self) -> Option<Duration> {
        self.utilization_time.take()
    }
}

/// Each card's hwmon files; a GPU's partitions after the first get none, as its files are
/// the whole GPU's.
fn open_hwmon(cards: &[Card]) -> Vec<Option<hwmon::Hwmon>> {
    let mut seen: Vec<&str> = Vec::new();
    cards
        .iter()
        .map(|card| {
            if seen.contains(&card.pdev.as_str()) {
                return None;
            }
            seen.push(&card.pdev);
            hwmon::Hwmon::open(&card.dir, card.driver)
        })
        .collect()
}

/// What the energy covers beyond the devices: an APU's socket, or a partition's GPU.
fn energy_scope(cards: &[Card], hwmon: &[Option<hwmon::Hwmon>]) -> Option<&'static str> {
    let read = |i: usize| hwmon[i].is_some();
    if hwmon.iter().flatten().any(|h| h.socket) {
        Some("socket")
    } else if cards
        .iter()
        .enumerate()
        .any(|(i, c)| c.partition.is_some() && read(i))
    {
        Some("gpu")
    } else {
        None
    }
}

/// Why a card gives no reading when its device has left the machine (unplugged, unbound).
fn gone(card: &Card) -> Option<String> {
    (!card.dir.join("uevent").exists()).then(|| {
        format!(
            "the GPU at {} is gone ({} is not there)",
            card.pdev,
            card.dir.display()
        )
    })
}

/// A device file that cannot be read, as a reading's error.
fn lost(why: &Missing, path: &Path) -> String {
    match why {
        Missing::Absent => format!(
            "the GPU is gone ({} is not there: removed, or its driver unbound)",
            path.display()
        ),
        other => other.describe(path),
    }
}
#[cfg(test)]
mod tests;

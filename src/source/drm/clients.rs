//! The DRM clients of processes, found through `<procfs>/<pid>/fd` and read from
//! `<procfs>/<pid>/fdinfo/<fd>`, summed per device.
//!
//! Finding which fds are DRM devices costs a directory listing and a `readlink` per fd, so
//! it is done a few processes per read and again only every [`RESCAN`]; reading the
//! fdinfo of the fds already found is a few small reads, done at every read.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::cards::Driver;
use super::fdinfo::{self, Split};
use super::files::{self, Missing};

/// How often the fds are looked through again for DRM devices opened since.
pub(crate) const RESCAN: Duration = Duration::from_millis(250);

/// At most this many processes' fd lists are looked through in one read: a `readlink` per
/// fd, so a few processes keep a read short; 500 processes take about 600 ms at 5 ms.
const PROCESSES_PER_READ: usize = 4;

/// Whose clients are read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Whose {
    /// This process's only.
    Own,
    /// Every process this user can read (a device's used memory, where the driver gives
    /// only the clients' figures).
    All,
}

/// One device's memory, summed over clients.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct DeviceUsage {
    /// The PCI slot, as `drm-pdev` names it.
    pub(crate) pdev: String,
    /// Device memory (`vram*`, `local*`); `None` when no client named such a region.
    pub(crate) device: Option<u64>,
    /// Host memory behind the device (`gtt`, `system*`, `stolen*`), reported apart.
    pub(crate) host: Option<u64>,
    /// Clients counted (each `drm-client-id` once).
    pub(crate) clients: u32,
}

/// What one read found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Usage {
    /// This process's clients, per device.
    pub(crate) own: Vec<DeviceUsage>,
    /// Every readable process's clients, per device (with [`Whose::All`] only).
    pub(crate) all: Vec<DeviceUsage>,
    /// `false` while a file of this process could not be read: its figures are then not
    /// measured rather than low.
    pub(crate) own_complete: bool,
}

impl Usage {
    /// This process's device memory on `pdev`: `None` while one of its fdinfo files
    /// could not be read; zero on a device where it has no client.
    pub(crate) fn own_device(&self, pdev: &str) -> Option<u64> {
        if !self.own_complete {
            return None;
        }
        match self.own.iter().find(|u| u.pdev == pdev) {
            Some(usage) => usage.device,
            None => Some(0),
        }
    }

    /// Every readable process's device memory on `pdev`.
    pub(crate) fn all_device(&self, pdev: &str) -> Option<u64> {
        self.all
            .iter()
            .find(|u| u.pdev == pdev)
            .and_then(|u| u.device)
    }
}

/// Something a user should hear once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Notice {
    /// Another user's process could not be looked at.
    Denied(PathBuf),
    /// One of this process's fdinfo files could not be read.
    Unreadable(String),
    /// A client of this process names no device-memory region (an APU).
    NoDeviceRegion(PathBuf),
    /// A memory line left out of a client's figures, as the file shows it.
    Malformed { path: PathBuf, line: String },
    /// A client of this process, of a driver read here, names no device (`drm-pdev`).
    NoDevice(PathBuf),
    /// Another process's fdinfo cannot be read (other than permission denied), in words.
    Left(String),
}

/// Reads the DRM clients of this process, or of every process, from a procfs root.
#[derive(Debug)]
pub(crate) struct Clients {
    procfs: PathBuf,
    pid: u32,
    whose: Whose,
    /// The DRM fds found, per process.
    known: HashMap<u32, Vec<u32>>,
    /// Processes still to look through in this round.
    pending: Vec<u32>,
    next_round: Option<Instant>,
    buf: Vec<u8>,
    notices: Vec<Notice>,
    told: HashSet<std::mem::Discriminant<Notice>>,
}

impl Clients {
    /// Reads `<procfs>/<pid>/...`, with `pid` this process's.
    pub(crate) fn new(procfs: &Path, pid: u32, whose: Whose) -> Self {
        Self {
            procfs: procfs.to_path_buf(),
            pid,
            whose,
            known: HashMap::new(),
            pending: Vec::new(),
            next_round: None,
            buf: Vec::with_capacity(1024),
            notices: Vec::new(),
            told: HashSet::new(),
        }
    }

    /// What should be said once (each kind the first time only), taken.
    pub(crate) fn take_notices(&mut self) -> Vec<Notice> {
        std::mem::take(&mut self.notices)
    }

    fn notice(&mut self, notice: Notice) {
        if self.told.insert(std::mem::discriminant(&notice)) {
            self.notices.push(notice);
        }
    }

    /// Looks for new DRM fds where due, then reads every known client.
    pub(crate) fn read(&mut self, now: Instant) -> Usage {
        self.scan_some(now);
        let mut usage = Usage {
            own_complete: true,
            ..Usage::default()
        };
        let mut seen_own: HashSet<(String, u64)> = HashSet::new();
        let mut seen_all: HashSet<(String, u64)> = HashSet::new();
        let mut gone = Vec::new();
        let mut pids: Vec<u32> = self.known.keys().copied().collect();
        pids.sort_unstable();
        for pid in pids {
            let fds = self.known.get(&pid).cloned().unwrap_or_default();
            for fd in fds {
                let path = self.procfs.join(format!("{pid}/fdinfo/{fd}"));
                let client = match files::read_into(&path, &mut self.buf) {
                    Ok(()) => fdinfo::parse(&self.buf),
                    Err(Missing::Absent) => None,
                    Err(why) => {
                        if pid == self.pid {
                            usage.own_complete = false;
                            self.notice(Notice::Unreadable(why.describe(&path)));
                        } else if why == Missing::Denied {
                            // Another user's client: the device's sum leaves it out, and
                            // says so.
                            self.notice(Notice::Denied(path));
                        } else {
                            self.notice(Notice::Left(why.describe(&path)));
                        }
                        continue;
                    }
                };
                // Closed, or reused for something else: that fd is dropped, the process's
                // other clients still count, and its fds are looked through again.
                let Some(client) = client else {
                    gone.push((pid, fd));
                    continue;
                };
                if let Some(line) = &client.malformed {
                    self.notice(Notice::Malformed {
                        path: path.clone(),
                        line: line.clone(),
                    });
                }
                let Some(pdev) = client.pdev.clone() else {
                    // Which device holds this process's memory cannot be told: not zero
                    // on each, but not measured.
                    if pid == self.pid && Driver::from_name(&client.driver).is_some() {
                        usage.own_complete = false;
                        self.notice(Notice::NoDevice(path));
                    }
                    continue;
                };
                // A client shared with another process (an fd passed on, or kept over a
                // fork) is counted once in the device's sum, and still in this process's
                // own figure whichever process was read first.
                let first = |seen: &mut HashSet<(String, u64)>| match client.client_id {
                    Some(id) => seen.insert((pdev.clone(), id)),
                    None => true,
                };
                let split = client.split();
                if pid == self.pid && first(&mut seen_own) {
                    // A device line left out is named as such, not taken for an APU.
                    if split.device.is_none() && client.malformed.is_none() {
                        self.notice(Notice::NoDeviceRegion(path));
                    }
                    add(&mut usage.own, &pdev, split);
                }
                if self.whose == Whose::All && first(&mut seen_all) {
                    add(&mut usage.all, &pdev, split);
                }
            }
        }
        for (pid, fd) in gone {
            if let Some(fds) = self.known.get_mut(&pid) {
                fds.retain(|known| *known != fd);
                if fds.is_empty() {
                    self.known.remove(&pid);
                }
            }
            if !self.pending.contains(&pid) {
                self.pending.push(pid);
            }
        }
        usage
    }

    /// Looks through a few processes' fds: the next ones of this round, or, when the round
    /// is over and the next is due, the first of a new one.
    fn scan_some(&mut self, now: Instant) {
        if self.pending.is_empty() && self.next_round.is_none_or(|next| now >= next) {
            self.next_round = Some(now + RESCAN);
            self.pending = match self.whose {
                Whose::Own => vec![self.pid],
                Whose::All => self.processes(),
            };
        }
        let take = self.pending.len().min(PROCESSES_PER_READ);
        let batch: Vec<u32> = self.pending.drain(..take).collect();
        for pid in batch {
            match self.drm_fds(pid) {
                Ok(fds) if fds.is_empty() => {
                    self.known.remove(&pid);
                }
                Ok(fds) => {
                    self.known.insert(pid, fds);
                }
                Err(Missing::Absent) => {
                    self.known.remove(&pid);
                }
                Err(Missing::Denied) => {
                    self.known.remove(&pid);
                    let path = self.procfs.join(format!("{pid}/fd"));
                    self.notice(Notice::Denied(path));
                }
                Err(why) => {
                    self.known.remove(&pid);
                    if pid == self.pid {
                        let path = self.procfs.join(format!("{pid}/fd"));
                        self.notice(Notice::Unreadable(why.describe(&path)));
                    }
                }
            }
        }
        // The processes that have gone are dropped as their files go (`read`).
    }

    /// Every process under the procfs root.
    fn processes(&self) -> Vec<u32> {
        let Ok(entries) = std::fs::read_dir(&self.procfs) else {
            return vec![self.pid];
        };
        let mut pids: Vec<u32> = entries
            .filter_map(Result::ok)
            .filter_map(|e| e.file_name().to_str()?.parse().ok())
            .collect();
        pids.sort_unstable();
        pids
    }

    /// The fds of `pid` that are DRM devices: those whose link points into `/dev/dri/`;
    /// where the root has no `fd` directory (a tree written by hand), every fdinfo.
    fn drm_fds(&self, pid: u32) -> Result<Vec<u32>, Missing> {
        let fd_dir = self.procfs.join(format!("{pid}/fd"));
        let entries = match std::fs::read_dir(&fd_dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return self.every_fdinfo(pid);
            }
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                return Err(Missing::Denied)
            }
            Err(e) => return Err(Missing::Failed(e.to_string())),
        };
        let mut fds: Vec<u32> = entries
            .filter_map(Result::ok)
            .filter(|entry| {
                std::fs::read_link(entry.path()).is_ok_and(|target| target.starts_with("/dev/dri/"))
            })
            .filter_map(|entry| entry.file_name().to_str()?.parse().ok())
            .collect();
        fds.sort_unstable();
        Ok(fds)
    }

    /// Every fdinfo of `pid` that is a DRM client's.
    fn every_fdinfo(&self, pid: u32) -> Result<Vec<u32>, Missing> {
        let dir = self.procfs.join(format!("{pid}/fdinfo"));
        match std::fs::read_dir(&dir) {
            Ok(entries) => {
                let mut buf = Vec::new();
                let mut fds: Vec<u32> = entries
                    .filter_map(Result::ok)
                    // One that cannot be read stays: it may be a client, so not zero.
                    .filter(|e| match files::read_into(&e.path(), &mut buf) {
                        Ok(()) => fdinfo::parse(&buf).is_some(),
                        Err(Missing::Absent) => false,
                        Err(_) => true,
                    })
                    .filter_map(|e| e.file_name().to_str()?.parse().ok())
                    .collect();
                fds.sort_unstable();
                Ok(fds)
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(Missing::Absent),
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => Err(Missing::Denied),
            Err(e) => Err(Missing::Failed(e.to_string())),
        }
    }
}

fn add(usages: &mut Vec<DeviceUsage>, pdev: &str, split: Split) {
    let index = match usages.iter().position(|u| u.pdev == pdev) {
        Some(index) => index,
        None => {
            usages.push(DeviceUsage {
                pdev: pdev.to_owned(),
                ..DeviceUsage::default()
            });
            usages.len() - 1
        }
    };
    let usage = &mut usages[index];
    usage.clients += 1;
    for (slot, bytes) in [
        (&mut usage.device, split.device),
        (&mut usage.host, split.host),
    ] {
        if let Some(bytes) = bytes {
            *slot = Some(slot.unwrap_or(0).saturating_add(bytes));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    fn client(procfs: &Path, pid: u32, fd: u32, id: u64) {
        let dir = procfs.join(format!("{pid}/fdinfo"));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join(fd.to_string()),
            format!(
                "drm-driver:\txe\ndrm-pdev:\t0000:4d:00.0\ndrm-client-id:\t{id}\n\
                 drm-resident-vram0:\t1 MiB\n"
            ),
        )
        .unwrap();
    }

    #[test]
    fn a_client_shared_with_a_process_read_first_is_still_this_process_s() {
        let dir = tempfile::tempdir().unwrap();
        // The same client in a parent (read first, a lower pid) and in this process.
        client(dir.path(), 50, 4, 9);
        client(dir.path(), 100, 7, 9);
        client(dir.path(), 100, 8, 10);
        let mut clients = Clients::new(dir.path(), 100, Whose::All);
        let usage = clients.read(Instant::now());
        assert_eq!(usage.own_device("0000:4d:00.0"), Some(2 * MIB));
        assert_eq!(usage.all_device("0000:4d:00.0"), Some(2 * MIB));
    }

    #[test]
    fn closing_one_client_leaves_the_process_s_other_clients_counted() {
        let dir = tempfile::tempdir().unwrap();
        client(dir.path(), 1, 3, 1);
        client(dir.path(), 1, 4, 2);
        // Many other processes, so a round of looking through fds takes several reads.
        for pid in 2..100 {
            std::fs::create_dir_all(dir.path().join(format!("{pid}/fdinfo"))).unwrap();
        }
        let mut clients = Clients::new(dir.path(), 1, Whose::All);
        let now = Instant::now();
        assert_eq!(clients.read(now).own_device("0000:4d:00.0"), Some(2 * MIB));
        std::fs::remove_file(dir.path().join("1/fdinfo/3")).unwrap();
        for _ in 0..4 {
            let usage = clients.read(now);
            assert_eq!(usage.own_device("0000:4d:00.0"), Some(MIB));
            assert_eq!(usage.all_device("0000:4d:00.0"), Some(MIB));
        }
    }
}

/// This process's DRM clients read as the sampler reads them, for the benches.
#[cfg(feature = "__bench")]
#[doc(hidden)]
pub mod __private {
    use std::path::Path;
    use std::time::Instant;

    /// One process's clients under a procfs root.
    #[derive(Debug)]
    pub struct OwnClients(super::Clients);

    impl OwnClients {
        /// Reads `<procfs>/<pid>/fd` and `fdinfo`.
        pub fn new(procfs: &Path, pid: u32) -> Self {
            Self(super::Clients::new(procfs, pid, super::Whose::Own))
        }

        /// One read at `now` (a new look at the fds when one is due); the device memory
        /// summed over the devices.
        pub fn read(&mut self, now: Instant) -> Option<u64> {
            let usage = self.0.read(now);
            usage
                .own
                .iter()
                .try_fold(0u64, |sum, u| u.device.map(|d| sum + d))
        }
    }
}

//! Host memory of this process: resident set size from `/proc/self/statm`.

use std::fs::File;
use std::os::unix::fs::FileExt;

/// Reads this process's resident memory with one `pread` of an open file.
#[derive(Debug)]
pub(crate) struct HostMemory {
    statm: Option<File>,
    page_size: u64,
}

impl HostMemory {
    pub(crate) fn open() -> Self {
        // SAFETY: sysconf has no preconditions.
        let page_size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        Self {
            statm: File::open("/proc/self/statm").ok(),
            page_size: u64::try_from(page_size).unwrap_or(4096),
        }
    }

    /// Resident set size in bytes, or `None` where `/proc` is not available.
    pub(crate) fn resident_bytes(&self) -> Option<u64> {
        let file = self.statm.as_ref()?;
        let mut buf = [0u8; 128];
        let n = file.read_at(&mut buf, 0).ok()?;
        let text = std::str::from_utf8(&buf[..n]).ok()?;
        let pages: u64 = text.split_whitespace().nth(1)?.parse().ok()?;
        Some(pages * self.page_size)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resident_memory_grows_when_pages_are_touched() {
        let host = HostMemory::open();
        let before = host.resident_bytes().expect("/proc/self/statm is readable");
        let block = vec![1u8; 64 << 20];
        let after = host.resident_bytes().unwrap();
        assert!(
            after >= before + (60 << 20),
            "before {before}, after {after}"
        );
        drop(block);
    }
}

//! Reading the kernel's small text files: a number, a `KEY=value` list, a `key value`
//! list. Absent is not zero: every reader says why a figure is missing.

use std::io::{ErrorKind, Read};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// The most read of one file. The kernel's files here are a few hundred bytes (an xe
/// client's fdinfo with every engine, a few kilobytes); anything longer is not one of
/// them, and is refused rather than read into memory.
pub(crate) const MOST: usize = 64 * 1024;

/// The most a memory figure can be: no device, nor the host memory behind it, comes near a
/// pebibyte, so a larger figure in one of the kernel's files is not a measurement, and is
/// refused rather than shown (summed, it would also pass what an OTLP integer carries).
pub(crate) const MOST_BYTES: u64 = 1 << 50;

/// Why a file gave no figure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Missing {
    /// The file is not there (an older kernel, a device removed).
    Absent,
    /// The file is there and this user may not read it.
    Denied,
    /// It could be read, but what it says is not a number.
    Malformed,
    /// A number of bytes past [`MOST_BYTES`].
    Implausible(u64),
    /// Another error, in words.
    Failed(String),
}

impl Missing {
    fn from_io(error: &std::io::Error) -> Self {
        match error.kind() {
            ErrorKind::NotFound => Missing::Absent,
            ErrorKind::PermissionDenied => Missing::Denied,
            // A device that went away answers ENODEV on files still open or listed.
            _ if error.raw_os_error() == Some(19) => Missing::Absent,
            // A process that ended between its listing and the read of its files.
            _ if error.raw_os_error() == Some(libc::ESRCH) => Missing::Absent,
            _ => Missing::Failed(error.to_string()),
        }
    }

    /// In words, for a reading's error or a warning.
    pub(crate) fn describe(&self, path: &Path) -> String {
        match self {
            Missing::Absent => format!("{} is not there", path.display()),
            Missing::Denied => format!("{} cannot be read (permission denied)", path.display()),
            Missing::Malformed => format!("{} does not hold a number", path.display()),
            Missing::Implausible(bytes) => format!(
                "{} says {bytes} bytes, more than any device holds (over 1 PiB): not a \
                 measurement",
                path.display()
            ),
            Missing::Failed(why) => format!("{} cannot be read ({why})", path.display()),
        }
    }
}

/// Reads `path` into `buf` (cleared first), at most [`MOST`] bytes. Only a regular file
/// is read (the kernel's sysfs and procfs files are): a FIFO, a device such as
/// `/dev/zero` or a socket put in the tree would block the sampler or fill its memory, so
/// it is refused before it is opened, and opened without blocking in case it changed.
pub(crate) fn read_into(path: &Path, buf: &mut Vec<u8>) -> Result<(), Missing> {
    buf.clear();
    let regular = |metadata: &std::fs::Metadata| {
        if metadata.is_file() {
            Ok(())
        } else {
            Err(Missing::Failed("not a regular file".to_owned()))
        }
    };
    regular(&std::fs::metadata(path).map_err(|e| Missing::from_io(&e))?)?;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| Missing::from_io(&e))?;
    regular(&file.metadata().map_err(|e| Missing::from_io(&e))?)?;
    file.take(MOST as u64 + 1)
        .read_to_end(buf)
        .map_err(|e| Missing::from_io(&e))?;
    if buf.len() > MOST {
        buf.clear();
        return Err(Missing::Failed(format!("longer than {MOST} bytes")));
    }
    Ok(())
}

/// A whole file's text, read as [`read_into`] reads.
pub(crate) fn read_text(path: &Path) -> Result<String, Missing> {
    let mut buf = Vec::new();
    read_into(path, &mut buf)?;
    String::from_utf8(buf).map_err(|_| Missing::Malformed)
}

/// A whole number alone in a file (`mem_info_vram_used`), decimal or `0x` hexadecimal.
pub(crate) fn number(path: &Path, buf: &mut Vec<u8>) -> Result<u64, Missing> {
    read_into(path, buf)?;
    let text = std::str::from_utf8(buf)
        .map_err(|_| Missing::Malformed)?
        .trim();
    parse_number(text).ok_or(Missing::Malformed)
}

/// A number of bytes alone in a file (`mem_info_vram_used`), read as [`number`] reads it,
/// and at most [`MOST_BYTES`].
pub(crate) fn bytes(path: &Path, buf: &mut Vec<u8>) -> Result<u64, Missing> {
    match number(path, buf)? {
        bytes if bytes > MOST_BYTES => Err(Missing::Implausible(bytes)),
        bytes => Ok(bytes),
    }
}

/// Decimal, or hexadecimal after `0x`.
pub(crate) fn parse_number(text: &str) -> Option<u64> {
    match text.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16).ok(),
        None => text.parse().ok(),
    }
}

/// A file's text, trimmed; `None` when it cannot be read or is empty.
pub(crate) fn text(path: &Path) -> Option<String> {
    let text = read_text(path).ok()?;
    let text = text.trim();
    (!text.is_empty()).then(|| text.to_owned())
}

/// The value of `key` in a `KEY=value` file (`uevent`).
pub(crate) fn uevent_value(text: &str, key: &str) -> Option<String> {
    text.lines()
        .filter_map(|line| line.split_once('='))
        .find(|(k, _)| k.trim() == key)
        .map(|(_, v)| v.trim().to_owned())
}

/// The value of `key` in a `key value` file (KFD's `properties`).
pub(crate) fn property(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let mut parts = line.split_whitespace();
        (parts.next()? == key).then(|| parts.next().and_then(parse_number))?
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_in_decimal_and_hex() {
        assert_eq!(parse_number("17163091968"), Some(17_163_091_968));
        assert_eq!(parse_number("0x10"), Some(16));
        assert_eq!(parse_number("-1"), None);
        assert_eq!(parse_number(""), None);
    }

    #[test]
    fn uevent_and_properties() {
        let uevent = "DRIVER=amdgpu\nPCI_CLASS=30000\nPCI_SLOT_NAME=0000:03:00.0\n";
        assert_eq!(uevent_value(uevent, "DRIVER").as_deref(), Some("amdgpu"));
        assert_eq!(
            uevent_value(uevent, "PCI_SLOT_NAME").as_deref(),
            Some("0000:03:00.0")
        );
        assert_eq!(uevent_value(uevent, "PCI_ID"), None);
        let properties = "cpu_cores_count 0\nlocation_id 768\ndomain 0\nunique_id 3\n";
        assert_eq!(property(properties, "location_id"), Some(768));
        assert_eq!(property(properties, "domain"), Some(0));
        assert_eq!(property(properties, "gpu_id"), None);
    }

    #[test]
    fn a_missing_file_is_absent_not_zero() {
        let mut buf = Vec::new();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("mem_info_vram_used");
        assert_eq!(number(&path, &mut buf), Err(Missing::Absent));
        std::fs::write(&path, "garbage\n").unwrap();
        assert_eq!(number(&path, &mut buf), Err(Missing::Malformed));
        std::fs::write(&path, "4096\n").unwrap();
        assert_eq!(number(&path, &mut buf), Ok(4096));
    }

    /// Runs `read` on a thread and gives its answer, or fails when it takes seconds.
    fn within_seconds<T: Send + 'static>(read: impl FnOnce() -> T + Send + 'static) -> T {
        let (send, receive) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = send.send(read());
        });
        receive
            .recv_timeout(std::time::Duration::from_secs(5))
            .expect("the read returns at once")
    }

    #[test]
    fn a_fifo_planted_in_the_tree_is_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("mem_info_vram_used");
        let c_path = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
        // SAFETY: `c_path` is a valid NUL-terminated path that outlives the call.
        assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
        let read = within_seconds(move || {
            let mut buf = Vec::new();
            (number(&path, &mut buf), text(&path))
        });
        assert!(
            matches!(&read.0, Err(Missing::Failed(why)) if why.contains("regular")),
            "{read:?}"
        );
        assert_eq!(read.1, None);
    }

    #[test]
    fn a_huge_file_is_refused_after_a_bounded_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("5");
        let file = std::fs::File::create(&path).unwrap();
        file.set_len(256 << 20).unwrap();
        let mut buf = Vec::new();
        let read = read_into(&path, &mut buf);
        assert!(
            matches!(&read, Err(Missing::Failed(why)) if why.contains("longer")),
            "{read:?}"
        );
        assert!(buf.capacity() < 1 << 20, "{} bytes held", buf.capacity());
    }

    #[test]
    fn dev_zero_linked_into_the_tree_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("uevent");
        std::os::unix::fs::symlink("/dev/zero", &path).unwrap();
        let read = within_seconds(move || read_text(&path));
        assert!(matches!(&read, Err(Missing::Failed(_))), "{read:?}");
    }
}

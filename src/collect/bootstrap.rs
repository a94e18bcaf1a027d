//! The Python bootstrap `gpuspan run` gives its command: a `sitecustomize.py`, first on the
//! command's `PYTHONPATH`, that hands `torch`, Lightning and Transformers to the gpuspan
//! package once the program imports them (see the file itself for what it promises).

use std::ffi::OsString;
use std::path::PathBuf;

/// The bootstrap's one file. It is the Python package's code (it hands over to
/// `gpuspan._autorun`), kept beside the package and outside it, so the wheel does not ship it.
const SITECUSTOMIZE: &str = include_str!("../../python/bootstrap/sitecustomize.py");

/// A directory holding the bootstrap, removed when dropped.
#[derive(Debug)]
pub(crate) struct Bootstrap {
    dir: PathBuf,
}

impl Bootstrap {
    /// Writes the bootstrap to a fresh directory under the system's temporary directory.
    ///
    /// # Errors
    /// The directory or the file cannot be written.
    pub(crate) fn write() -> std::io::Result<Self> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .subsec_nanos();
        let dir =
            std::env::temp_dir().join(format!("gpuspan-run-{}-{nanos:09}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let bootstrap = Self { dir };
        std::fs::write(bootstrap.dir.join("sitecustomize.py"), SITECUSTOMIZE)?;
        Ok(bootstrap)
    }

    /// `PYTHONPATH` for the command: the bootstrap first, then what was there.
    pub(crate) fn python_path(&self, existing: Option<OsString>) -> OsString {
        let mut paths = vec![self.dir.clone()];
        if let Some(existing) = existing.filter(|p| !p.is_empty()) {
            paths.extend(std::env::split_paths(&existing));
        }
        std::env::join_paths(paths).unwrap_or_else(|_| self.dir.clone().into_os_string())
    }
}

impl Drop for Bootstrap {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bootstrap_comes_first_on_the_path_and_is_removed_afterwards() {
        let bootstrap = Bootstrap::write().unwrap();
        let dir = bootstrap.dir.clone();
        let written = std::fs::read_to_string(dir.join("sitecustomize.py")).unwrap();
        assert_eq!(written, SITECUSTOMIZE);
        let path = bootstrap.python_path(Some(OsString::from("/a:/b")));
        let parts: Vec<PathBuf> = std::env::split_paths(&path).collect();
        assert_eq!(
            parts,
            vec![dir.clone(), PathBuf::from("/a"), PathBuf::from("/b")]
        );
        assert_eq!(
            bootstrap.python_path(Some(OsString::new())),
            dir.as_os_str()
        );
        drop(bootstrap);
        assert!(!dir.exists());
    }
}

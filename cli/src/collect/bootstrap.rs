//! The Python bootstrap `gpuspan run` gives its command: a `sitecustomize.py`, first on the
//! command's `PYTHONPATH`, that hands `torch`, Lightning and Transformers, once the program
//! imports them, to the functions registered in the entry point group `gpuspan.autorun`
//! (the gpuspan package registers one; see the file itself for what it promises).

use std::ffi::OsString;
use std::path::Path;

/// The bootstrap's one file. It finds the Python package through an entry point group, not
/// by name, so that the command depends on no package above it; it is kept outside the
/// package, so the wheel does not ship it, and inside this crate, so the published crate
/// builds from its own files.
const SITECUSTOMIZE: &str = include_str!("sitecustomize.py");

/// A directory holding the bootstrap, removed when dropped.
#[derive(Debug)]
pub(crate) struct Bootstrap {
    /// Removed, with the file, when dropped.
    dir: tempfile::TempDir,
}

impl Bootstrap {
    /// Writes the bootstrap to a new directory under the system's temporary directory.
    ///
    /// The directory is made for this run (mode 0700, a random name; making it fails
    /// rather than reuse one that exists, or follow a link there): the command imports
    /// the file at its start, so no other user may prepare or change it.
    ///
    /// # Errors
    /// The directory or the file cannot be written.
    pub(crate) fn write() -> std::io::Result<Self> {
        Self::write_in(&std::env::temp_dir(), 8)
    }

    /// [`write`](Self::write) under `parent`, with `random_chars` random characters in the
    /// directory's name.
    fn write_in(parent: &Path, random_chars: usize) -> std::io::Result<Self> {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::Builder::new()
            .prefix("gpuspan-run-")
            .rand_bytes(random_chars)
            .permissions(std::fs::Permissions::from_mode(0o700))
            .tempdir_in(parent)?;
        std::fs::write(dir.path().join("sitecustomize.py"), SITECUSTOMIZE)?;
        Ok(Self { dir })
    }

    /// `PYTHONPATH` for the command: the bootstrap first, then what was there.
    ///
    /// A temporary directory whose path holds the separator (`:`) cannot be an entry of
    /// it: the command then gets its own path unchanged, without the bootstrap, and one
    /// line says so.
    pub(crate) fn python_path(&self, existing: Option<OsString>) -> OsString {
        let existing = existing.filter(|p| !p.is_empty());
        let mut paths = vec![self.dir.path().to_path_buf()];
        if let Some(existing) = &existing {
            paths.extend(std::env::split_paths(existing));
        }
        std::env::join_paths(paths).unwrap_or_else(|_| {
            eprintln!(
                "gpuspan run: warning: the Python bootstrap's directory {} has a ':' in its \
                 path, so it cannot go on PYTHONPATH and the command gets no step spans; set \
                 TMPDIR to a directory without one",
                self.dir.path().display()
            );
            existing.unwrap_or_default()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    #[test]
    fn the_bootstrap_comes_first_on_the_path_and_is_removed_afterwards() {
        let bootstrap = Bootstrap::write().unwrap();
        let dir = bootstrap.dir.path().to_path_buf();
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

    #[test]
    fn the_bootstrap_directory_is_new_and_only_its_owner_can_enter_it() {
        use std::os::unix::fs::PermissionsExt;
        let bootstrap = Bootstrap::write().unwrap();
        let mode = std::fs::metadata(bootstrap.dir.path())
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o700, "mode {mode:o}");
        assert!(bootstrap.dir.path().starts_with(std::env::temp_dir()));
    }

    /// Another user can create a directory, or a link to one of theirs, where the bootstrap
    /// would go; with no random part in its name (`random_chars` 0), the bootstrap's place is
    /// known in advance, as a predictable name would make it.
    fn planted(make: impl Fn(&Path)) -> (tempfile::TempDir, PathBuf) {
        let parent = tempfile::tempdir().unwrap();
        let place = parent.path().join("gpuspan-run-");
        make(&place);
        (parent, place)
    }

    #[test]
    fn a_directory_planted_where_the_bootstrap_goes_is_not_used() {
        let (_parent, place) = planted(|place| {
            std::fs::create_dir(place).unwrap();
            std::fs::write(place.join("sitecustomize.py"), "planted").unwrap();
        });
        assert!(Bootstrap::write_in(place.parent().unwrap(), 0).is_err());
        let kept = std::fs::read_to_string(place.join("sitecustomize.py")).unwrap();
        assert_eq!(kept, "planted");
    }

    #[test]
    fn a_link_planted_where_the_bootstrap_goes_is_not_followed() {
        let elsewhere = tempfile::tempdir().unwrap();
        let target = elsewhere.path().to_path_buf();
        let (_parent, place) = planted(|place| std::os::unix::fs::symlink(&target, place).unwrap());
        assert!(Bootstrap::write_in(place.parent().unwrap(), 0).is_err());
        assert!(!target.join("sitecustomize.py").exists());
        assert!(std::fs::symlink_metadata(&place)
            .unwrap()
            .file_type()
            .is_symlink());
    }

    #[test]
    fn a_temporary_directory_with_a_colon_leaves_the_program_s_python_path_as_it_was() {
        // No entry of a path can hold its separator: the bootstrap cannot be on it.
        let parent = tempfile::tempdir().unwrap();
        let colon = parent.path().join("a:b");
        std::fs::create_dir(&colon).unwrap();
        let bootstrap = Bootstrap::write_in(&colon, 8).unwrap();
        assert_eq!(
            bootstrap.python_path(Some(OsString::from("/lib/one:/lib/two"))),
            OsString::from("/lib/one:/lib/two")
        );
        assert_eq!(bootstrap.python_path(None), OsString::new());
    }

    #[test]
    fn without_anything_planted_the_bootstrap_is_written() {
        let (_parent, place) = planted(|_| {});
        let bootstrap = Bootstrap::write_in(place.parent().unwrap(), 0).unwrap();
        assert_eq!(
            std::fs::read_to_string(bootstrap.dir.path().join("sitecustomize.py")).unwrap(),
            SITECUSTOMIZE
        );
    }
}

//! What `gpuspan collect` forwards one signal to, as `super::forward` builds it from the
//! destination: the request-level OTLP client, an OTLP/JSON lines file or standard output,
//! or nowhere. The collector's sink (`collect/forward.rs`) sends each queued request to it.
//!
//! Threading: a remote target sends on the collector's runtime, a local one writes on the
//! export queue's thread.

use std::fs::OpenOptions;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::export::otlp::request::{RequestClient, RequestError};

/// Where one signal's requests go.
#[derive(Debug)]
pub enum ForwardTarget {
    /// Dropped on purpose, and counted as delivered.
    Nowhere,
    /// One OTLP/JSON line each.
    Lines(LineFile),
    /// As they came, to an OTLP endpoint.
    Otlp(RequestClient),
}

/// Why a forward target could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// The signal's file cannot be opened.
    #[error("cannot open {path}: {source}")]
    File {
        /// The file.
        path: PathBuf,
        #[source]
        /// Why.
        source: std::io::Error,
    },
    /// The OTLP client cannot be built.
    #[error(transparent)]
    Otlp(#[from] RequestError),
}

/// An OTLP/JSON lines file, or standard output. Not the SDK's run-directory writer: each
/// line goes out in a single `write`, so lines from another writer of the same file (the
/// collector's own gauges, through the SDK) never interleave with it.
pub struct LineFile(Mutex<Box<dyn Write + Send>>);

impl std::fmt::Debug for LineFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("LineFile")
    }
}

impl LineFile {
    pub(crate) fn append(path: &Path) -> Result<Self, OpenError> {
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|source| OpenError::File {
                path: path.to_path_buf(),
                source,
            })?;
        Ok(Self(Mutex::new(Box::new(file))))
    }

    pub(crate) fn stdout() -> Self {
        Self(Mutex::new(Box::new(std::io::stdout())))
    }

    /// Writes `value` as one OTLP/JSON line, in a single `write`.
    ///
    /// # Errors
    /// The value cannot be serialized or the line cannot be written.
    pub fn write(&self, value: &impl serde::Serialize) -> std::io::Result<()> {
        let mut line = serde_json::to_vec(value)?;
        line.push(b'\n');
        let mut out = self.0.lock().unwrap_or_else(|p| p.into_inner());
        out.write_all(&line).and_then(|()| out.flush())
    }
}

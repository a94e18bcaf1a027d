//! Why a `gpuspan` command failed: one error for every command, printed after `gpuspan: `.

use std::path::PathBuf;

use gpuspan::runlog;

/// Why a `gpuspan` command failed; printed after `gpuspan: `.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CommandError {
    /// A directory could not be read.
    #[error("cannot read {}: {source}", path.display())]
    ReadDir {
        /// The directory.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A directory holds no run.
    #[error(
        "{} holds no run: expected {} in it, or run directories below it",
        dir.display(),
        runlog::TRACES_FILE
    )]
    NoRun {
        /// The directory.
        dir: PathBuf,
    },
    /// A named picture was asked of a directory of several ranks.
    #[error(
        "{} holds {ranks} ranks: give one rank's directory (such as {}) to draw it into a named file",
        dir.display(),
        first.display()
    )]
    SeveralRanks {
        /// The directory.
        dir: PathBuf,
        /// How many ranks it holds.
        ranks: usize,
        /// The first rank's directory.
        first: PathBuf,
    },
    /// A picture or page could not be written.
    #[error("cannot write {}: {source}", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A run could not be read or drawn.
    #[error(transparent)]
    Report(#[from] crate::report::ReportError),
    /// A run's summary could not be read.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// gpuspan could not start.
    #[error(transparent)]
    Init(#[from] gpuspan::InitError),
    /// gpuspan did not shut down cleanly.
    #[error(transparent)]
    Shutdown(#[from] gpuspan::ShutdownError),
    /// `watch` found no GPU.
    #[error("no GPU to watch (see the warning above)")]
    NoGpu,
    /// The collector could not handle SIGINT and SIGTERM.
    #[error("cannot handle signals: {0}")]
    Signals(#[source] std::io::Error),
    /// The collector could not start.
    #[error(transparent)]
    Collect(#[from] crate::collect::CollectError),
}

//! Pictures of a run: the HTML page, SVG and PNG, drawn from a run directory read back
//! through `gpuspan::runlog` (the run writes its TensorBoard event files itself).
//!
//! ```no_run
//! # fn main() -> Result<(), gpuspan_cli::report::ReportError> {
//! let run = gpuspan_cli::report::Run::read(std::path::Path::new("gpuspan-runs/my-run"))?;
//! std::fs::write("report.html", gpuspan_cli::report::html(&run)).unwrap();
//! # Ok(()) }
//! ```

mod envelope;
mod html;
mod job;
mod png;
mod run;
mod svg;

use std::path::PathBuf;

pub use gpuspan::runlog::{
    read_timeline, Figure, Series, Timeline, TimelineDevice, TimelineError, TimelineFormatError,
    TIMELINE_FILE,
};
pub use gpuspan::runlog::{Marker, DIAGNOSIS_EVENTS};
pub use html::html;
pub use job::job_html;
pub use png::{png, png_base64};
pub use run::Run;
pub use svg::svg;

/// Why a report could not be made.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReportError {
    /// A file of the run could not be read.
    #[error("cannot read {path}: {source} (is it a gpuspan run directory?)")]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The timeline file could not be read.
    #[error(transparent)]
    Timeline(#[from] TimelineError),
    /// The picture could not be rendered.
    #[error("cannot render the picture: {0}")]
    Render(String),
}

/// One lane of memory drawn over time.
pub(crate) struct Lane<'a> {
    pub(crate) label: String,
    pub(crate) series: &'a Series,
    pub(crate) total: Option<u64>,
}

/// What a picture draws from a timeline: each device's used memory, then host memory.
pub(crate) fn lanes(timeline: &Timeline) -> Vec<Lane<'_>> {
    let mut lanes = Vec::new();
    for (i, device) in timeline.devices.iter().enumerate() {
        let Some(series) = timeline.figure(Figure::DeviceUsed(i)) else {
            continue;
        };
        lanes.push(Lane {
            label: format!("gpu {} · {}", device.id, device.name),
            series,
            total: timeline
                .figure(Figure::DeviceTotal(i))
                .and_then(|s| s.points.iter().rev().find_map(|p| p.1)),
        });
    }
    if let Some(series) = timeline.figure(Figure::HostRss) {
        if series.points.iter().any(|p| p.1.is_some()) {
            lanes.push(Lane {
                label: "host memory (resident, this process)".into(),
                series,
                total: None,
            });
        }
    }
    lanes
}

/// The page of the run in `dir`, for a notebook cell (`IPython.display.HTML`).
///
/// # Errors
/// See [`Run::read`].
pub fn inline_html(dir: &std::path::Path) -> Result<String, ReportError> {
    Ok(html(&Run::read(dir)?))
}

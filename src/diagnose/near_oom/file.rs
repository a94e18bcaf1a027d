//! A finding's `near-oom-<time>.json`, built and written on the recorder's own thread.

use std::path::PathBuf;
use std::sync::Arc;

use serde::Serialize;

use super::ring::Snapshot;
use crate::diagnose::open_spans::OpenSpan;
use crate::record::GpuId;

/// What one finding writes: everything the file says, owned, so that the writer thread
/// builds the JSON.
pub(super) struct Job {
    pub(super) path: PathBuf,
    pub(super) event: &'static str,
    pub(super) unix_nanos: u64,
    pub(super) message: Option<String>,
    pub(super) threshold: f64,
    /// Position of the device in the sampler's order.
    pub(super) device: usize,
    /// Every device, in the sampler's order.
    pub(super) ids: Vec<GpuId>,
    pub(super) used: Option<u64>,
    pub(super) limit: Option<u64>,
    pub(super) rise: Option<(u64, u64)>,
    pub(super) rise_span: Option<String>,
    pub(super) open: Vec<OpenSpan>,
    /// Shared by the findings of one tick.
    pub(super) ring: Arc<Snapshot>,
    /// The warning line printed once the file is written.
    pub(super) warning: String,
}

impl Job {
    /// The file's contents, borrowed from the job: written straight out, with no JSON tree
    /// of the window built in memory first.
    pub(super) fn body(&self) -> Body<'_> {
        Body {
            event: self.event,
            time_unix_nano: self.unix_nanos,
            message: self.message.as_deref(),
            threshold: self.threshold,
            device: DeviceBody {
                index: self.ids.get(self.device).copied(),
                used: self.used,
                limit: self.limit,
            },
            rise: RiseBody {
                start_unix_nano: self.rise.map(|r| r.0),
                from: self.rise.map(|r| r.1),
                span: self.rise_span.as_deref(),
            },
            open_spans: self
                .open
                .iter()
                .map(|s| OpenSpanBody {
                    name: s.name,
                    index: s.index.map(|i| i.1),
                    start_unix_nano: s.start_unix_nanos,
                })
                .collect(),
            timeline: TimelineBody {
                unix_nano: &self.ring.times,
                devices: (0..self.ring.devices())
                    .map(|d| DeviceColumn {
                        index: self.ids.get(d).copied().unwrap_or(GpuId::gpu(d as u32)),
                        used: self.ring.column(d),
                        limit: self.ring.total(d),
                    })
                    .collect(),
                process_gpu: &self.ring.process_gpu,
                allocated: &self.ring.allocated,
                reserved: &self.ring.reserved,
            },
        }
    }
}

/// `near-oom-<time>.json`.
#[derive(Serialize)]
pub(super) struct Body<'a> {
    pub(super) event: &'static str,
    pub(super) time_unix_nano: u64,
    pub(super) message: Option<&'a str>,
    pub(super) threshold: f64,
    pub(super) device: DeviceBody,
    pub(super) rise: RiseBody<'a>,
    pub(super) open_spans: Vec<OpenSpanBody>,
    pub(super) timeline: TimelineBody<'a>,
}

#[derive(Serialize)]
pub(super) struct DeviceBody {
    pub(super) index: Option<GpuId>,
    pub(super) used: Option<u64>,
    pub(super) limit: Option<u64>,
}

#[derive(Serialize)]
pub(super) struct RiseBody<'a> {
    pub(super) start_unix_nano: Option<u64>,
    pub(super) from: Option<u64>,
    pub(super) span: Option<&'a str>,
}

#[derive(Serialize)]
pub(super) struct OpenSpanBody {
    pub(super) name: &'static str,
    pub(super) index: Option<i64>,
    pub(super) start_unix_nano: u64,
}

/// The ring as columns: times, then each figure per device.
#[derive(Serialize)]
pub(super) struct TimelineBody<'a> {
    pub(super) unix_nano: &'a [u64],
    pub(super) devices: Vec<DeviceColumn<'a>>,
    pub(super) process_gpu: &'a [Option<u64>],
    pub(super) allocated: &'a [Option<u64>],
    pub(super) reserved: &'a [Option<u64>],
}

#[derive(Serialize)]
pub(super) struct DeviceColumn<'a> {
    pub(super) index: GpuId,
    pub(super) used: &'a [Option<u64>],
    pub(super) limit: Option<u64>,
}

/// Writes the file, with its folder if need be.
pub(super) fn write_job(job: &Job) -> std::io::Result<()> {
    write_job_through(job, |file| file)
}

/// Writes what `job` says through `wrap` (a test's full disk) to a name of its own beside
/// `job.path`, then renames it into place: a file that cannot be written whole (a full
/// disk) is removed, and one a signal cuts short keeps that name, so `job.path` is only
/// ever a whole file.
pub(super) fn write_job_through<W: std::io::Write>(
    job: &Job,
    wrap: impl FnOnce(std::fs::File) -> W,
) -> std::io::Result<()> {
    if let Some(dir) = job.path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let aside = aside(&job.path);
    let written = write_body(job, wrap(std::fs::File::create(&aside)?))
        .and_then(|()| std::fs::rename(&aside, &job.path));
    if written.is_err() {
        let _ = std::fs::remove_file(&aside);
    }
    written
}

fn write_body(job: &Job, file: impl std::io::Write) -> std::io::Result<()> {
    use std::io::Write as _;
    let mut file = std::io::BufWriter::new(file);
    serde_json::to_writer(&mut file, &job.body())?;
    file.write_all(b"\n")?;
    // Written, not synced: the page cache outlives the process (what an out-of-memory
    // error may end), and an fsync on a busy disk stalls the sampler's ticks with it.
    file.flush()
}

/// `.<name>.tmp` beside `path`: hidden, and no `near-oom-*.json` a reader picks up.
pub(super) fn aside(path: &std::path::Path) -> std::path::PathBuf {
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    path.with_file_name(format!(".{name}.tmp"))
}

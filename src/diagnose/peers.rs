//! The ranks of one job tell each other when one runs out of memory. A rank whose OOM or
//! near-OOM the recorder finds posts an alarm file to the job's directory (`alarms/` beside
//! the ranks' `rank-<n>` directories); every other rank's watcher thread reads it within a
//! poll and puts `gpu.memory.peer_oom` on its open span, with one line on stderr. A rank
//! that then waits in a collective for the rank that died is thereby told why.
//!
//! No server: the job's directory is shared by the ranks of one node, and by every node
//! when the run directory is on a shared file system.
//!
//! Threading: alarms are posted from the near-OOM recorder's writer thread (an
//! out-of-memory error's from a thread of its own) and read on `gpuspan-peers`, which polls
//! the directory ten times a second; neither touches the training thread or the sampler.

use std::collections::HashSet;
use std::ffi::OsString;
use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::sync::Mutex;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use opentelemetry::KeyValue;
use serde::{Deserialize, Serialize};

use crate::config::Settings;
use crate::figures::{device_attributes, int};
use crate::names::{attribute as attr, event};
use crate::record::GpuId;
use crate::util::bytes;

/// How often a watcher reads the job's alarms: well inside the second a peer is told in.
const POLL: Duration = Duration::from_millis(100);

/// The folder of the job's directory the alarms go to.
pub(crate) const ALARMS_DIR: &str = "alarms";

/// What a rank posts when it runs out of memory, or comes near.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Alarm {
    pub(crate) rank: i64,
    pub(crate) host: Option<String>,
    /// `gpu.memory.oom` or `gpu.memory.near_oom`.
    pub(crate) event: String,
    pub(crate) time_unix_nano: u64,
    pub(crate) gpu: GpuId,
    pub(crate) epoch: Option<i64>,
    pub(crate) step: Option<i64>,
    /// The highest device memory in use over the recorder's window, in bytes.
    pub(crate) peak: Option<u64>,
    pub(crate) limit: Option<u64>,
}

impl Alarm {
    /// `rank 3 (node-b) ran out of memory at step 12 of epoch 1 (gpu 3: 79.6 GiB of 80 GiB)`.
    fn describe(&self) -> String {
        let mut line = format!("rank {}", self.rank);
        if let Some(host) = &self.host {
            line.push_str(&format!(" ({host})"));
        }
        line.push_str(if self.event == event::OOM {
            " ran out of device memory"
        } else {
            " came near the end of its device memory"
        });
        match (self.step, self.epoch) {
            (Some(step), Some(epoch)) => {
                line.push_str(&format!(" at step {step} of epoch {epoch}"))
            }
            (Some(step), None) => line.push_str(&format!(" at step {step}")),
            (None, Some(epoch)) => line.push_str(&format!(" in epoch {epoch}")),
            (None, None) => {}
        }
        line.push_str(&format!(" (gpu {}", self.gpu));
        if let Some(peak) = self.peak {
            line.push_str(&format!(": {} peak", human(peak)));
            if let Some(limit) = self.limit {
                line.push_str(&format!(" of {}", human(limit)));
            }
        }
        line.push(')');
        line
    }

    /// The `gpu.memory.peer_oom` event's attributes.
    fn attributes(&self) -> Vec<KeyValue> {
        let mut attributes = vec![
            KeyValue::new(attr::ML_RANK, self.rank),
            KeyValue::new(attr::GPU_MEMORY_PEER_FINDING, self.event.clone()),
        ];
        attributes.extend(device_attributes(self.gpu));
        attributes.extend(self.host.clone().map(|h| KeyValue::new(attr::HOST_NAME, h)));
        attributes.extend(self.epoch.map(|e| KeyValue::new(attr::ML_EPOCH, e)));
        attributes.extend(self.step.map(|s| KeyValue::new(attr::ML_STEP, s)));
        attributes.extend(
            self.peak
                .map(|p| KeyValue::new(attr::GPU_MEMORY_PEAK, int(p))),
        );
        attributes.extend(
            self.limit
                .map(|l| KeyValue::new(attr::GPU_MEMORY_LIMIT, int(l))),
        );
        attributes
    }
}

fn human(value: u64) -> String {
    bytes::human(int(value))
}

/// One rank's place on its job's alarm board.
#[derive(Debug, Clone)]
pub(crate) struct Board {
    dir: PathBuf,
    rank: i64,
    host: Option<String>,
}

impl Board {
    /// The board of a job of several ranks: `<run root>/<run id>/alarms`; `None` for a
    /// run of one process, and for a rank whose run directory is its own (no launcher named
    /// the job), which says so in one line.
    pub(crate) fn for_run(settings: &Settings) -> Option<Self> {
        let rank = settings.rank.rank?;
        let world = settings.rank.world_size?;
        if world < 2 {
            return None;
        }
        if settings.run_id_is_own {
            eprintln!(
                "gpuspan: warning: rank {rank} of {world} has no job id from its launcher, so \
                 its run directory {} is its own: no other rank hears when it runs out of \
                 memory, nor it of theirs, and `gpuspan report` reads it as a job of one rank; \
                 give every rank of the job the same {} (torchrun: --rdzv-id)",
                settings.run_dir().display(),
                crate::config::vars::GPUSPAN_JOB_ID,
            );
            return None;
        }
        Some(Self {
            dir: settings.run_root.join(&settings.run_id).join(ALARMS_DIR),
            rank,
            host: crate::resource::host_name(),
        })
    }

    /// Rank `rank`'s place on the board in `dir`, for the recorder's tests.
    #[cfg(test)]
    pub(crate) fn in_dir(dir: PathBuf, rank: i64) -> Self {
        Self {
            dir,
            rank,
            host: None,
        }
    }

    pub(crate) fn rank(&self) -> i64 {
        self.rank
    }

    pub(crate) fn host(&self) -> Option<String> {
        self.host.clone()
    }

    /// Posts `alarm` as `rank-<rank>-<time>.json`, written aside and renamed into place
    /// so that a watcher never reads half of it.
    pub(crate) fn post(&self, alarm: &Alarm) -> std::io::Result<PathBuf> {
        self.post_through(alarm, |file| file)
    }

    /// [`post`](Self::post), writing through `wrap` (a test's full disk). What cannot be
    /// written whole is removed: a full disk leaves no part of an alarm behind.
    fn post_through<W: std::io::Write>(
        &self,
        alarm: &Alarm,
        wrap: impl FnOnce(std::fs::File) -> W,
    ) -> std::io::Result<PathBuf> {
        std::fs::create_dir_all(&self.dir)?;
        let name = format!("{}{}.json", file_prefix(alarm.rank), alarm.time_unix_nano);
        let path = self.dir.join(&name);
        let aside = self.dir.join(format!(".{name}.tmp"));
        let text = serde_json::to_string(alarm).map_err(std::io::Error::other)? + "\n";
        let posted = std::fs::File::create(&aside)
            .and_then(|file| {
                let mut file = wrap(file);
                file.write_all(text.as_bytes())?;
                file.flush()
            })
            .and_then(|()| std::fs::rename(&aside, &path));
        if posted.is_err() {
            let _ = std::fs::remove_file(&aside);
        }
        posted.map(|()| path)
    }

    fn own(&self, name: &str) -> bool {
        name.starts_with(&file_prefix(self.rank))
    }
}

/// An alarm's file is `rank-<rank>-<time>.json`.
fn file_prefix(rank: i64) -> String {
    format!("rank-{rank}-")
}

fn is_alarm(name: &std::ffi::OsStr) -> bool {
    name.to_str()
        .is_some_and(|n| n.starts_with("rank-") && n.ends_with(".json"))
}

/// How a watcher reads an alarm file: [`read_alarm`], or a test's stuck one.
type ReadAlarm = Box<dyn FnMut(&Path) -> std::io::Result<Option<Vec<u8>>> + Send>;

/// The alarm at `path`; `None` when it is not a regular file. Opened without waiting: a
/// FIFO that took the place of a file after the directory was read must not hold the
/// watcher until something writes to it.
fn read_alarm(path: &Path) -> std::io::Result<Option<Vec<u8>>> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    if !file.metadata()?.is_file() {
        return Ok(None);
    }
    let mut text = Vec::new();
    file.read_to_end(&mut text)?;
    Ok(Some(text))
}

/// The line that says a name in the alarms folder is passed over, once per name.
fn not_a_file_line(path: &Path) -> String {
    format!(
        "gpuspan: warning: passing over {}: an alarm is a regular file, and this is not one \
         (remove it; nothing gpuspan writes makes it)",
        path.display()
    )
}

/// What a watcher has read so far.
struct Seen {
    board: Board,
    read: ReadAlarm,
    /// Alarms older than this (an earlier attempt of the job with the same id) are old news.
    since_unix_nanos: u64,
    files: HashSet<OsString>,
    /// `(rank, event)` pairs already told on stderr: one line each.
    told: HashSet<(i64, String)>,
}

impl Seen {
    /// The other ranks' alarms posted since the last poll.
    fn poll(&mut self) -> Vec<Alarm> {
        let Ok(entries) = std::fs::read_dir(&self.board.dir) else {
            return Vec::new();
        };
        let mut fresh = Vec::new();
        for entry in entries.flatten() {
            let name = entry.file_name();
            if !is_alarm(&name) || self.files.contains(&name) {
                continue;
            }
            if name.to_str().is_some_and(|n| self.board.own(n)) {
                self.files.insert(name);
                continue;
            }
            // Not followed: a link or a FIFO is no alarm, and opening one may wait.
            let regular = entry.file_type().map(|t| t.is_file());
            let text = match regular {
                Ok(true) => (self.read)(&entry.path()),
                Ok(false) => Ok(None),
                Err(error) => Err(error),
            };
            let text = match text {
                Ok(Some(text)) => text,
                Ok(None) => {
                    eprintln!("{}", not_a_file_line(&entry.path()));
                    self.files.insert(name);
                    continue;
                }
                // Gone, or not readable yet: tried again at the next poll.
                Err(_) => continue,
            };
            self.files.insert(name);
            match serde_json::from_slice::<Alarm>(&text) {
                Ok(alarm) if alarm.time_unix_nano >= self.since_unix_nanos => fresh.push(alarm),
                Ok(_) => {}
                Err(error) => eprintln!(
                    "gpuspan: warning: cannot read the alarm {}: {error}",
                    entry.path().display()
                ),
            }
        }
        fresh.sort_by_key(|a| a.time_unix_nano);
        fresh
    }

    fn tell(&mut self, alarm: &Alarm) {
        if self.told.insert((alarm.rank, alarm.event.clone())) {
            eprintln!(
                "gpuspan: warning: {}; rank {} may now wait for it in a collective",
                alarm.describe(),
                self.board.rank
            );
        }
    }
}

/// The thread that reads the other ranks' alarms; told to stop when dropped.
#[derive(Debug)]
pub(crate) struct Watcher {
    stop: Mutex<Option<Sender<()>>>,
    thread: Mutex<Option<JoinHandle<()>>>,
    /// The job's alarm folder, for the line that says the thread is stuck there.
    dir: PathBuf,
}

impl Watcher {
    /// Starts `gpuspan-peers`, which hands each alarm of another rank to `told`: the time
    /// it was read and the `gpu.memory.peer_oom` event's attributes.
    pub(crate) fn start(
        board: Board,
        told: impl Fn(u64, Vec<KeyValue>) + Send + 'static,
    ) -> std::io::Result<Self> {
        Self::start_reading(board, Box::new(read_alarm), told)
    }

    /// [`start`](Self::start), with how alarms are read given.
    fn start_reading(
        board: Board,
        read: ReadAlarm,
        told: impl Fn(u64, Vec<KeyValue>) + Send + 'static,
    ) -> std::io::Result<Self> {
        let (stop, stopped) = mpsc::channel::<()>();
        let dir = board.dir.clone();
        let mut seen = Seen {
            board,
            read,
            since_unix_nanos: crate::util::time::unix_nanos(std::time::SystemTime::now()),
            files: HashSet::new(),
            told: HashSet::new(),
        };
        let thread = std::thread::Builder::new()
            .name("gpuspan-peers".into())
            .spawn(move || {
                crate::background::silence_tracing();
                loop {
                    for alarm in seen.poll() {
                        seen.tell(&alarm);
                        let now = crate::util::time::unix_nanos(std::time::SystemTime::now());
                        told(now, alarm.attributes());
                    }
                    match stopped.recv_timeout(POLL) {
                        Err(RecvTimeoutError::Timeout) => {}
                        Ok(()) | Err(RecvTimeoutError::Disconnected) => break,
                    }
                }
            })?;
        Ok(Self {
            stop: Mutex::new(Some(stop)),
            thread: Mutex::new(Some(thread)),
            dir,
        })
    }

    /// Tells the thread to stop, without waiting: it stops within a poll, unless a read
    /// of the job's directory holds it.
    pub(crate) fn tell_to_stop(&self) {
        crate::util::sync::lock(&self.stop).take();
    }

    /// Stops the thread, waiting for it until `deadline` (see
    /// [`join_by`](crate::background::join_by)): on a shared file system that stopped
    /// answering, a read of the job's directory never returns. Returns whether the thread
    /// stopped; if not, one line says so.
    pub(crate) fn stop_by(&self, deadline: Instant) -> bool {
        self.tell_to_stop();
        let Some(thread) = crate::util::sync::lock(&self.thread).take() else {
            return true;
        };
        if crate::background::join_by(thread, deadline) {
            return true;
        }
        eprintln!(
            "gpuspan: warning: gave up waiting at shutdown for the thread that reads the other \
             ranks' alarms: it is stuck reading {} (a shared file system that stopped \
             answering?)",
            self.dir.display()
        );
        false
    }
}

impl Drop for Watcher {
    /// Tells the thread to stop and leaves it: a drop never waits on a file system.
    fn drop(&mut self) {
        self.tell_to_stop();
    }
}

#[cfg(test)]
mod tests;

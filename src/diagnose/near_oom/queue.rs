//! What the near-OOM writer thread is handed, and how much of it waits.
//!
//! One [`Batch`] holds a finding's alarm and files: the crossings of one sampler tick
//! (eight devices crossing together are one batch), or one out-of-memory error. The writer
//! posts the alarm first, for the other ranks wait on it, then writes the files.
//!
//! Near-OOM batches wait in a bounded [`Queue`]: a disk slower than the crossings must not
//! hold the whole window again and again in memory. When it is full a batch is dropped,
//! counted and said once. An out-of-memory error never waits there: the program waits for
//! its file, maybe about to die, so it gets a thread of its own ([`write_now`]), which a
//! writer stuck in a slow file system cannot hold back.

use std::collections::VecDeque;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::SyncSender;
use std::sync::{Arc, Condvar, Mutex};

use super::file::{write_job, Job};
use crate::diagnose::peers::{Alarm, Board};
use crate::util::sync::lock;

/// Near-OOM batches that may wait for the writer.
pub(super) const CAPACITY: usize = 8;

/// A finding's alarm and files, written in that order.
pub(super) struct Batch {
    /// What the job's other ranks are told, in a job of several.
    pub(super) alarm: Option<Alarm>,
    pub(super) files: Vec<Job>,
    /// Told once every file is written (or failed): whether all were written whole.
    pub(super) done: Option<SyncSender<bool>>,
}

/// How a file is written: [`write_job`], or a test's slower one.
pub(super) type WriteFile = Arc<dyn Fn(&Job) -> std::io::Result<()> + Send + Sync>;

/// Writes batches: the alarm, then the files, each with its line on stderr.
pub(crate) struct Writer {
    pub(super) board: Option<Board>,
    pub(super) write: WriteFile,
}

impl std::fmt::Debug for Writer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Writer")
            .field("board", &self.board)
            .finish_non_exhaustive()
    }
}

impl Writer {
    /// The writer of real files.
    pub(crate) fn new(board: Option<Board>) -> Self {
        Self {
            board,
            write: Arc::new(write_job),
        }
    }

    /// Posts the batch's alarm, then writes its files, then says it is done: the other
    /// ranks are told even when a file cannot be written (a full disk).
    pub(super) fn run(&self, batch: Batch) {
        if let (Some(board), Some(alarm)) = (&self.board, &batch.alarm) {
            if let Err(error) = board.post(alarm) {
                eprintln!(
                    "gpuspan: warning: cannot tell the job's other ranks (alarm of rank {}): \
                     {error}",
                    alarm.rank
                );
            }
        }
        let mut all_written = true;
        for job in &batch.files {
            match (self.write)(job) {
                Ok(()) => eprintln!("{}", job.warning),
                Err(error) => {
                    all_written = false;
                    eprintln!(
                        "gpuspan: warning: cannot write {}: {error}; no part of it is kept",
                        job.path.display()
                    )
                }
            }
        }
        if let Some(done) = batch.done {
            let _ = done.send(all_written);
        }
    }
}

/// Runs `batch` on a thread of its own, for an out-of-memory error: it waits behind no
/// other file.
pub(super) fn write_now(writer: &Arc<Writer>, batch: Batch) {
    write_now_spawning(writer, batch, |work| {
        std::thread::Builder::new()
            .name("gpuspan-oom".into())
            .spawn(work)
            .map(drop)
    });
}

/// [`write_now`], starting its thread with `spawn`. When no thread can start, the caller
/// (the program, maybe about to die) only posts the alarm, one small file, and the
/// timeline is left unwritten with one line: a file of the whole window on a slow disk
/// must not hold the program with no bound.
pub(super) fn write_now_spawning(
    writer: &Arc<Writer>,
    batch: Batch,
    spawn: impl FnOnce(Box<dyn FnOnce() + Send>) -> std::io::Result<()>,
) {
    let shared = Arc::clone(writer);
    let batch = Arc::new(Mutex::new(Some(batch)));
    let taken = Arc::clone(&batch);
    let started = spawn(Box::new(move || {
        if let Some(batch) = lock(&taken).take() {
            shared.run(batch);
        }
    }));
    if let Err(error) = started {
        if let Some(batch) = lock(&batch).take() {
            writer.run(Batch {
                alarm: batch.alarm,
                files: Vec::new(),
                done: None,
            });
            for job in &batch.files {
                eprintln!(
                    "gpuspan: warning: no thread could start to write {} ({error}): the \
                     out-of-memory error's timeline is not written, only its event and alarm",
                    job.path.display()
                );
            }
            if let Some(done) = batch.done {
                let _ = done.send(batch.files.is_empty());
            }
        }
    }
}

#[derive(Default)]
struct State {
    batches: VecDeque<Batch>,
    closed: bool,
}

/// The near-OOM batches waiting for the writer thread.
#[derive(Default)]
pub(super) struct Queue {
    state: Mutex<State>,
    ready: Condvar,
    /// Batches dropped because the queue was full.
    dropped: AtomicU64,
    told: AtomicBool,
}

impl std::fmt::Debug for Queue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queue")
            .field("waiting", &lock(&self.state).batches.len())
            .field("dropped", &self.dropped())
            .finish_non_exhaustive()
    }
}

impl Queue {
    /// Queues `batch` for the writer; `false` when the queue is full (the batch is
    /// counted as dropped) or closed.
    pub(super) fn offer(&self, batch: Batch) -> bool {
        let mut state = lock(&self.state);
        if state.closed {
            return false;
        }
        if state.batches.len() >= CAPACITY {
            self.dropped.fetch_add(1, Ordering::Relaxed);
            return false;
        }
        state.batches.push_back(batch);
        drop(state);
        self.ready.notify_one();
        true
    }

    /// The next batch, waiting for one; `None` once closed and empty.
    fn take(&self) -> Option<Batch> {
        let mut state = lock(&self.state);
        loop {
            if let Some(batch) = state.batches.pop_front() {
                return Some(batch);
            }
            if state.closed {
                return None;
            }
            state = self
                .ready
                .wait(state)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
        }
    }

    /// Takes no more batches; the writer writes those queued and stops.
    pub(super) fn close(&self) {
        lock(&self.state).closed = true;
        self.ready.notify_all();
    }

    /// Near-OOM batches dropped so far.
    pub(super) fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Says once that batches were dropped, the first time any are found dropped.
    pub(super) fn tell_dropped(&self, run_dir: &Path) {
        if let Some(line) = self.dropped_line(run_dir) {
            eprintln!("{line}");
        }
    }

    /// The line that says batches were dropped: once, when there are any.
    pub(super) fn dropped_line(&self, run_dir: &Path) -> Option<String> {
        let dropped = self.dropped();
        if dropped == 0 || self.told.swap(true, Ordering::Relaxed) {
            return None;
        }
        Some(format!(
            "gpuspan: warning: the near-OOM timeline writer fell behind (writing to {} is \
             slow): the crossings of {dropped} sampler tick(s) got no timeline file, only \
             their event on the span; an out-of-memory error always gets its file",
            run_dir.display()
        ))
    }
}

/// The writer thread's loop: each queued batch in turn, until the queue is closed.
pub(super) fn write_batches(queue: &Queue, writer: &Writer, run_dir: &Path) {
    while let Some(batch) = queue.take() {
        writer.run(batch);
        queue.tell_dropped(run_dir);
    }
    queue.tell_dropped(run_dir);
}

//! The near-OOM flight recorder: the last seconds of samples at full resolution in a
//! bounded ring, kept on the sampler thread. When a device crosses a fraction of its total,
//! or the program reports an out-of-memory error, the ring and every open span go to
//! `near-oom-<time>.json` in the run directory, and an event waits for the innermost open
//! span to pass the export tap.
//!
//! Threading: the sampler thread pushes each tick into the ring under its lock. A finding
//! copies the ring's columns out under that lock (a few `memcpy`s) and hands the copy to
//! the recorder's own thread, which builds and writes the JSON: sampling never waits for a
//! file, and is not held back most exactly when memory is near its limit. The crossings of
//! one tick are one batch for that thread, and a batch it has no room for is dropped (see
//! `queue`). An out-of-memory error is written on a thread of its own, which the caller
//! waits for: it never waits behind near-OOM files, and is never dropped.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use opentelemetry::KeyValue;

#[cfg(test)]
mod behind_a_slow_writer;
mod file;
mod finding;
mod oom;
mod queue;
mod ring;

use finding::fullness;
pub use oom::record_oom;
pub(crate) use queue::Writer;
use queue::{write_batches, Batch, Queue};
use ring::Ring;

use super::counts::Counts;
use super::open_spans::OpenSpans;
use super::peers::Board;
use crate::names::event;
use crate::record::GpuId;
use crate::timeline::{Tick, TickObserver};
use crate::util::sync::lock;

/// Findings kept while they wait for their span.
const MAX_PENDING: usize = 64;

/// A finding waiting for the innermost span open at `unix_nanos` to be exported.
#[derive(Debug, Clone)]
pub(crate) struct PendingEvent {
    pub(crate) name: &'static str,
    pub(crate) unix_nanos: u64,
    pub(crate) attributes: Vec<KeyValue>,
}

/// Shared by the ring observer (sampler thread), the span tap (export thread),
/// [`record_oom`] and the panic hook.
#[derive(Debug)]
pub(crate) struct Recorder {
    ring: Mutex<Ring>,
    threshold: f64,
    open_spans: Arc<OpenSpans>,
    pending: Mutex<Vec<PendingEvent>>,
    /// The devices, in sampler order (set once the sampler has started).
    device_ids: OnceLock<Vec<GpuId>>,
    run_dir: PathBuf,
    /// The near-OOM batches waiting for the writer thread.
    queue: Arc<Queue>,
    /// What posts the alarms and writes the files, on that thread and an OOM's own.
    writer: Arc<Writer>,
    thread: Mutex<Option<JoinHandle<()>>>,
    counts: Arc<Counts>,
    /// Files written so far, to keep names unique within a millisecond.
    written: AtomicU64,
    /// The job's alarm board, where a finding tells the other ranks (a job of several).
    board: Option<Board>,
}

impl Recorder {
    /// Starts the file-writing thread with `writer` (whose board is where a finding tells
    /// the other ranks, in a job of several) and registers the recorder for [`record_oom`].
    pub(crate) fn start(
        threshold: f64,
        window: Duration,
        run_dir: PathBuf,
        open_spans: Arc<OpenSpans>,
        counts: Arc<Counts>,
        writer: Writer,
    ) -> std::io::Result<Arc<Self>> {
        let board = writer.board.clone();
        let queue = Arc::new(Queue::default());
        let writer = Arc::new(writer);
        let (waiting, writing, dir) = (Arc::clone(&queue), Arc::clone(&writer), run_dir.clone());
        let thread = std::thread::Builder::new()
            .name("gpuspan-near-oom".into())
            .spawn(move || {
                // Writing a window of JSON takes a while: the sampler comes first.
                crate::background::lowest_priority();
                write_batches(&waiting, &writing, &dir);
            })?;
        let recorder = Arc::new(Self {
            ring: Mutex::new(Ring::new(
                u64::try_from(window.as_nanos()).unwrap_or(u64::MAX),
            )),
            threshold,
            open_spans,
            pending: Mutex::new(Vec::new()),
            device_ids: OnceLock::new(),
            run_dir,
            queue,
            writer,
            thread: Mutex::new(Some(thread)),
            counts,
            written: AtomicU64::new(0),
            board,
        });
        oom::register(&recorder);
        Ok(recorder)
    }

    /// Each device, in the sampler's order.
    pub(crate) fn set_device_ids(&self, ids: Vec<GpuId>) {
        let _ = self.device_ids.set(ids);
    }

    fn device_id(&self, position: usize) -> GpuId {
        let id = self.device_ids.get().and_then(|d| d.get(position).copied());
        id.unwrap_or(GpuId::gpu(u32::try_from(position).unwrap_or(u32::MAX)))
    }

    /// Findings that wait for their span; the tap takes the ones it places.
    pub(crate) fn pending(&self) -> MutexGuard<'_, Vec<PendingEvent>> {
        lock(&self.pending)
    }

    /// The sampler took a reading: keep it, and check the threshold. The devices that
    /// crossed copy the ring out once and leave their files to the writer thread, as one
    /// batch.
    fn on_tick(&self, tick: &Tick<'_>) {
        let mut ring = lock(&self.ring);
        ring.push(tick);
        if ring.armed.len() != tick.devices.len() {
            ring.armed = vec![true; tick.devices.len()];
        }
        let mut crossed = Vec::new();
        for (device, (used, total)) in tick.devices.iter().zip(tick.totals).enumerate() {
            let (Some(used), Some(total)) = (*used, *total) else {
                continue;
            };
            let over = total > 0 && used as f64 >= self.threshold * total as f64;
            if over && ring.armed[device] {
                ring.armed[device] = false;
                crossed.push(device);
            } else if !over {
                ring.armed[device] = true;
            }
        }
        if crossed.is_empty() {
            return;
        }
        let snapshot = Arc::new(ring.snapshot());
        drop(ring);
        let open = self.open_spans.open();
        let fullest = crossed.iter().copied().max_by(|&a, &b| {
            let full = |device| fullness(&snapshot, device).unwrap_or(0.0);
            full(a).total_cmp(&full(b))
        });
        let alarm = fullest.and_then(|device| {
            self.alarm(&snapshot, event::NEAR_OOM, device, tick.unix_nanos, &open)
        });
        let mut events = Vec::with_capacity(crossed.len());
        let mut files = Vec::with_capacity(crossed.len());
        for device in crossed {
            let finding = self.finding(
                &snapshot,
                event::NEAR_OOM,
                device,
                tick.unix_nanos,
                None,
                &open,
            );
            events.push((finding.attributes, finding.name));
            files.push(finding.job);
        }
        let queued = self.queue.offer(Batch {
            alarm,
            files,
            done: None,
        });
        for (attributes, name) in events {
            // A batch the writer had no room for names no file.
            let timeline = queued.then_some(name);
            self.report(event::NEAR_OOM, tick.unix_nanos, attributes, timeline);
        }
    }

    /// Another rank's alarm, read at `unix_nanos`: its event waits for the span open then.
    pub(crate) fn peer_found(&self, unix_nanos: u64, attributes: Vec<KeyValue>) {
        let counter = self.counts.slot(event::PEER_OOM, &attributes);
        self.wait_for_span(PendingEvent {
            name: event::PEER_OOM,
            unix_nanos,
            attributes,
        });
        if let Some(counter) = counter {
            counter.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn wait_for_span(&self, event: PendingEvent) {
        let mut pending = self.pending();
        // A finding no exported span covers (none was open) waits for nothing: keep few.
        if pending.len() >= MAX_PENDING {
            pending.remove(0);
        }
        pending.push(event);
    }

    /// `near-oom-YYYYMMDD-HHMMSS.mmm.json` (UTC), with a counter past the first.
    fn file_name(&self, unix_nanos: u64) -> String {
        let (date, time) = crate::util::time::utc_date_time(unix_nanos / 1_000_000_000);
        let millis = unix_nanos / 1_000_000 % 1000;
        match self.written.fetch_add(1, Ordering::Relaxed) {
            0 => format!("near-oom-{date}-{time}.{millis:03}.json"),
            n => format!("near-oom-{date}-{time}.{millis:03}-{n}.json"),
        }
    }

    /// Writes what is queued and stops the writer thread, waiting for it until `deadline`
    /// (see [`join_by`](crate::background::join_by)). Returns whether the writer finished;
    /// if not, one line says so.
    pub(crate) fn stop_by(&self, deadline: Instant) -> bool {
        self.queue.close();
        let Some(thread) = lock(&self.thread).take() else {
            return true;
        };
        if crate::background::join_by(thread, deadline) {
            return true;
        }
        self.queue.tell_dropped(&self.run_dir);
        eprintln!(
            "gpuspan: warning: gave up waiting for the near-OOM timeline writer at shutdown; \
             a file it was writing in {} may be incomplete",
            self.run_dir.display()
        );
        false
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        // The writer thread writes what is queued and ends.
        self.queue.close();
    }
}

/// Keeps the ring on the sampler thread.
pub(crate) struct RingObserver(pub(crate) Arc<Recorder>);

impl TickObserver for RingObserver {
    fn on_tick(&mut self, tick: &Tick<'_>) {
        self.0.on_tick(tick);
    }
}

/// `SystemTime` of a UNIX-nanosecond instant.
pub(crate) fn system_time(unix_nanos: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_nanos(unix_nanos)
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;

    use super::file::{self, Job};
    use super::*;

    #[test]
    fn stopping_waits_at_most_its_bound_for_a_writer_stuck_in_the_file_system() {
        let dir = tempfile::tempdir().expect("a temporary directory");
        // Opening a FIFO for writing blocks until a reader opens it: a file system that
        // hangs, as a stale network mount does. The file is written aside first.
        let path = dir.path().join("near-oom-stuck.json");
        let fifo = file::aside(&path);
        let c_path = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
        let recorder = Recorder::start(
            0.95,
            Duration::from_secs(1),
            dir.path().to_path_buf(),
            Arc::default(),
            Arc::default(),
            Writer::new(None),
        )
        .expect("the writer starts");
        let job = Job {
            path,
            event: "gpu.memory.near_oom",
            unix_nanos: 1,
            message: None,
            threshold: 0.95,
            device: 0,
            ids: vec![GpuId::gpu(0)],
            used: Some(96),
            limit: Some(100),
            rise: None,
            rise_span: None,
            open: Vec::new(),
            ring: Arc::default(),
            warning: "written".into(),
        };
        assert!(
            recorder.queue.offer(Batch {
                alarm: None,
                files: vec![job],
                done: None,
            }),
            "the writer takes the job"
        );

        let (stopped, answer) = mpsc::channel();
        let stopping = Arc::clone(&recorder);
        std::thread::spawn(move || {
            let _ = stopped.send(stopping.stop_by(Instant::now() + Duration::from_millis(300)));
        });
        let finished = answer
            .recv_timeout(Duration::from_secs(10))
            .expect("stop returned within its bound while the writer was stuck");
        assert!(
            !finished,
            "the writer cannot have finished: nothing read the FIFO"
        );

        // Let the stuck writer go, so the test leaves no thread blocked behind.
        let mut reader = std::fs::File::open(&fifo).expect("the FIFO opens for reading");
        let mut written = Vec::new();
        std::io::Read::read_to_end(&mut reader, &mut written).expect("read");
        assert!(!written.is_empty());
    }
}

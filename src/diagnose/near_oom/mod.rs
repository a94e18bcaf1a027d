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
use std::sync::mpsc;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use opentelemetry::KeyValue;

#[cfg(test)]
mod behind_a_slow_writer;
mod file;
mod queue;
mod ring;

use file::Job;
use queue::{write_batches, write_now, Batch, Queue, Writer};
use ring::{rise_start, Ring, Snapshot};

use super::counts::Counts;
use super::open_spans::{OpenSpan, OpenSpans};
use super::peers::{Alarm, Board};
use crate::figures::{device_attributes, int};
use crate::names::{attribute as attr, event};
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

/// Recorders of the running telemetries, for [`record_oom`] and the panic hook.
static RECORDERS: Mutex<Vec<Weak<Recorder>>> = Mutex::new(Vec::new());

impl Recorder {
    /// Starts the file-writing thread and registers the recorder for [`record_oom`].
    pub(crate) fn start(
        threshold: f64,
        window: Duration,
        run_dir: PathBuf,
        open_spans: Arc<OpenSpans>,
        counts: Arc<Counts>,
        board: Option<Board>,
    ) -> std::io::Result<Arc<Self>> {
        let writer = Writer::new(board.clone());
        Self::start_with(
            threshold, window, run_dir, open_spans, counts, board, writer,
        )
    }

    /// [`start`](Self::start), with the writer given.
    fn start_with(
        threshold: f64,
        window: Duration,
        run_dir: PathBuf,
        open_spans: Arc<OpenSpans>,
        counts: Arc<Counts>,
        board: Option<Board>,
        writer: Writer,
    ) -> std::io::Result<Arc<Self>> {
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
        let mut recorders = lock(&RECORDERS);
        recorders.retain(|r| r.strong_count() > 0);
        recorders.push(Arc::downgrade(&recorder));
        install_panic_hook();
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

    /// The program ran out of memory: record it on the fullest device and wait (up to a
    /// few seconds) until the file is on disk, since the process may be about to die.
    fn record_oom(&self, message: &str) {
        // Tried, not waited for: the panic hook may run on a thread that holds the ring.
        let mut ring = None;
        for _ in 0..100 {
            match self.ring.try_lock() {
                Ok(guard) => ring = Some(guard),
                Err(std::sync::TryLockError::Poisoned(p)) => ring = Some(p.into_inner()),
                Err(std::sync::TryLockError::WouldBlock) => {
                    std::thread::sleep(Duration::from_millis(1));
                    continue;
                }
            }
            break;
        }
        let Some(ring) = ring else {
            return;
        };
        let snapshot = Arc::new(ring.snapshot());
        drop(ring);
        let now = crate::util::time::unix_nanos(SystemTime::now());
        let device = (0..snapshot.devices())
            .filter_map(|i| Some((i, fullness(&snapshot, i)?)))
            .max_by(|a, b| a.1.total_cmp(&b.1))
            .map_or(0, |(i, _)| i);
        let open = self.open_spans.open();
        let finding = self.finding(&snapshot, event::OOM, device, now, Some(message), &open);
        let alarm = self.alarm(&snapshot, event::OOM, device, now, &open);
        let (done, finished) = mpsc::sync_channel(1);
        write_now(
            &self.writer,
            Batch {
                alarm,
                files: vec![finding.job],
                done: Some(done),
            },
        );
        // Waited for with the ring unlocked: the sampler keeps sampling meanwhile. The
        // event names the file only once it is there whole.
        let written = finished.recv_timeout(OOM_WAIT).unwrap_or(false);
        let timeline = written.then_some(finding.name);
        self.report(event::OOM, now, finding.attributes, timeline);
    }

    /// One device's finding: its event's attributes (all but the file's name), the file's
    /// name, and what the file says.
    fn finding(
        &self,
        ring: &Arc<Snapshot>,
        event: &'static str,
        device: usize,
        unix_nanos: u64,
        message: Option<&str>,
        open: &[OpenSpan],
    ) -> Finding {
        let used = ring.last_used(device);
        let limit = ring.total(device);
        let rise = rise_start(ring, device);
        let rise_span = rise.and_then(|(at, _)| self.open_spans.innermost_at(at));
        let name = self.file_name(unix_nanos);

        let mut attributes: Vec<KeyValue> = device_attributes(self.device_id(device)).collect();
        attributes.extend(used.map(|u| KeyValue::new(attr::GPU_MEMORY_USED, int(u))));
        attributes.extend(limit.map(|l| KeyValue::new(attr::GPU_MEMORY_LIMIT, int(l))));
        if let Some((_, from)) = rise {
            attributes.push(KeyValue::new(attr::GPU_MEMORY_RISE_FROM, int(from)));
        }
        if let Some(span) = &rise_span {
            attributes.push(KeyValue::new(attr::GPU_MEMORY_RISE_SPAN, span.label()));
        }
        if let Some(message) = message {
            attributes.push(KeyValue::new(attr::EXCEPTION_MESSAGE, message.to_owned()));
        }
        let what = match (message, used, limit) {
            (Some(message), _, _) => format!("out of memory ({message})"),
            (None, Some(used), Some(limit)) => format!(
                "gpu {} at {:.0}% of its memory ({} of {})",
                self.device_id(device),
                used as f64 / limit.max(1) as f64 * 100.0,
                crate::util::bytes::human(int(used)),
                crate::util::bytes::human(int(limit))
            ),
            _ => "near out of memory".to_owned(),
        };
        let path = self.run_dir.join(&name);
        let ids = (0..ring.devices().max(device + 1))
            .map(|i| self.device_id(i))
            .collect();
        let job = Job {
            warning: format!("gpuspan: warning: {what}; timeline in {}", path.display()),
            path,
            event,
            unix_nanos,
            message: message.map(str::to_owned),
            threshold: self.threshold,
            device,
            ids,
            used,
            limit,
            rise,
            rise_span: rise_span.as_ref().map(OpenSpan::label),
            open: open.to_vec(),
            ring: Arc::clone(ring),
        };
        Finding {
            attributes,
            name,
            job,
        }
    }

    /// What the job's other ranks are told of a finding on `device` (a job of several).
    fn alarm(
        &self,
        ring: &Snapshot,
        event: &'static str,
        device: usize,
        unix_nanos: u64,
        open: &[OpenSpan],
    ) -> Option<Alarm> {
        self.board.as_ref().map(|board| Alarm {
            rank: board.rank(),
            host: board.host(),
            event: event.to_owned(),
            time_unix_nano: unix_nanos,
            gpu: self.device_id(device),
            epoch: innermost_index(open, attr::ML_EPOCH),
            step: innermost_index(open, attr::ML_STEP),
            peak: ring.peak(device),
            limit: ring.total(device),
        })
    }

    /// Counts a finding and leaves its event for the span open at its time; `timeline`
    /// names its file, when it gets one.
    fn report(
        &self,
        event: &'static str,
        unix_nanos: u64,
        mut attributes: Vec<KeyValue>,
        timeline: Option<String>,
    ) {
        if let Some(name) = timeline {
            attributes.push(KeyValue::new(attr::GPU_MEMORY_TIMELINE, name));
        }
        let counter = self.counts.slot(event, &attributes);
        self.wait_for_span(PendingEvent {
            name: event,
            unix_nanos,
            attributes,
        });
        if let Some(counter) = counter {
            counter.fetch_add(1, Ordering::Relaxed);
        }
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

/// How long `record_oom` waits for its file: the process may be about to die, but a file
/// system that hangs must not hang it.
const OOM_WAIT: Duration = Duration::from_secs(5);

/// One device's finding, before it is reported.
struct Finding {
    attributes: Vec<KeyValue>,
    name: String,
    job: Job,
}

/// How full `device` was at the ring's last reading, as a fraction of its total.
fn fullness(ring: &Snapshot, device: usize) -> Option<f64> {
    Some(ring.last_used(device)? as f64 / ring.total(device)?.max(1) as f64)
}

/// The index (`ml.epoch` or `ml.step`) of the innermost open span that has one.
fn innermost_index(open: &[OpenSpan], key: &str) -> Option<i64> {
    open.iter()
        .rev()
        .find_map(|s| s.index.filter(|(k, _)| *k == key).map(|(_, i)| i))
}

/// Keeps the ring on the sampler thread.
pub(crate) struct RingObserver(pub(crate) Arc<Recorder>);

impl TickObserver for RingObserver {
    fn on_tick(&mut self, tick: &Tick<'_>) {
        self.0.on_tick(tick);
    }
}

/// Records an out-of-memory error the program caught: the event `gpu.memory.oom` goes on
/// the innermost open span (with the device, its memory in use and its total), and the
/// last seconds of samples with every open span go to `near-oom-<time>.json` in the run
/// directory. Returns once that file is written (or after 5 s), so a program may exit
/// right after. It records in the [`Telemetry`](crate::Telemetry) of the current
/// subscriber, else in every running one; without any it does nothing.
///
/// A panic whose message says "out of memory" (as CUDA's and the frameworks' errors do)
/// is recorded the same way, before the panic unwinds.
pub fn record_oom(message: &str) {
    let current = tracing::dispatcher::get_default(|dispatch| {
        dispatch
            .downcast_ref::<super::OpenSpanLayer>()
            .and_then(|layer| layer.recorder.upgrade())
    });
    let recorders: Vec<Arc<Recorder>> = match current {
        Some(recorder) => vec![recorder],
        None => lock(&RECORDERS).iter().filter_map(Weak::upgrade).collect(),
    };
    for recorder in recorders {
        recorder.record_oom(message);
    }
}

/// Whether a panic message reads as an out-of-memory error.
fn is_oom_message(message: &str) -> bool {
    let message = message.to_ascii_lowercase();
    message.contains("out of memory") || message.contains("out_of_memory")
}

/// Chains a hook that records OOM panics in front of the program's own hook, once.
fn install_panic_hook() {
    static INSTALLED: OnceLock<()> = OnceLock::new();
    INSTALLED.get_or_init(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let payload = info.payload();
            let message = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned());
            if let Some(message) = message.filter(|m| is_oom_message(m)) {
                record_oom(&message);
            }
            previous(info);
        }));
    });
}

/// `SystemTime` of a UNIX-nanosecond instant.
pub(crate) fn system_time(unix_nanos: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_nanos(unix_nanos)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ring_of(values: &[u64]) -> Ring {
        let mut ring = Ring::new(5_000);
        for (i, &v) in values.iter().enumerate() {
            let used = [Some(v)];
            let totals = [Some(100)];
            ring.push(&Tick {
                totals: &totals,
                ..Tick::of_devices(1000 * (i as u64 + 1), &used)
            });
        }
        ring
    }

    #[test]
    fn the_ring_keeps_only_its_window() {
        let ring = ring_of(&[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
        let times: Vec<u64> = ring.times.iter().copied().collect();
        assert_eq!(times, [5000, 6000, 7000, 8000, 9000, 10000]);
    }

    #[test]
    fn the_rise_starts_where_the_device_last_stood_low() {
        let ring = ring_of(&[40, 30, 31, 30, 50, 70, 96]);
        // Window 5 µs: 30, 31, 30, 50, 70, 96 are kept; lowest 30, mark 36: the rise
        // starts with the 50 read after the last 30.
        assert_eq!(rise_start(&ring.snapshot(), 0), Some((5000, 30)));
    }

    #[test]
    fn out_of_memory_panics_are_recognised() {
        assert!(is_oom_message(
            "CUDA out of memory. Tried to allocate 2.00 GiB"
        ));
        assert!(is_oom_message("DriverError(CUDA_ERROR_OUT_OF_MEMORY)"));
        assert!(!is_oom_message("index out of bounds"));
    }

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
            None,
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

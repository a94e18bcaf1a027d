//! The recorder with its writer stuck in the file system (its first file waits until the
//! test lets it go): eight devices crossing together, tick after tick, must not cost the
//! out-of-memory error that follows them its alarm or its file, nor may a writer that is
//! stopping or a full disk.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime};

use super::file::{write_job, write_job_through, Job};
use super::queue::{Writer, CAPACITY};
use super::*;
use crate::diagnose::peers::{Alarm, Board};
use crate::names::attribute as attr;

const DEVICES: usize = 8;
const TOTAL: u64 = 80 << 30;
const LOW: u64 = 20 << 30;
const HIGH: u64 = 79 << 30;

/// Holds the writer's first file until opened.
#[derive(Default)]
struct Gate {
    open: Mutex<bool>,
    changed: Condvar,
    /// Files the writer has begun.
    begun: AtomicUsize,
}

impl Gate {
    fn pass(&self) {
        if self.begun.fetch_add(1, Ordering::SeqCst) == 0 {
            let mut open = lock(&self.open);
            while !*open {
                open = self.changed.wait(open).unwrap();
            }
        }
    }

    fn open(&self) {
        *lock(&self.open) = true;
        self.changed.notify_all();
    }

    /// Waits (bounded) until the writer is held at the gate.
    fn wait_until_held(&self) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.begun.load(Ordering::SeqCst) == 0 {
            assert!(Instant::now() < deadline, "the writer never began a file");
            std::thread::sleep(Duration::from_millis(1));
        }
    }
}

struct Setup {
    recorder: Arc<Recorder>,
    gate: Arc<Gate>,
    run_dir: PathBuf,
    alarms: PathBuf,
    _dir: tempfile::TempDir,
}

/// Rank 0 of a job, its writer held at the gate, writing its files with `write`.
fn recorder_with(write: impl Fn(&Job) -> std::io::Result<()> + Send + Sync + 'static) -> Setup {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let run_dir = dir.path().join("job").join("rank-0");
    let alarms = dir.path().join("job").join("alarms");
    let board = Board::in_dir(alarms.clone(), 0);
    let gate = Arc::new(Gate::default());
    let held = Arc::clone(&gate);
    let writer = Writer {
        board: Some(board.clone()),
        write: Arc::new(move |job: &Job| {
            held.pass();
            write(job)
        }),
    };
    let recorder = Recorder::start(
        0.95,
        Duration::from_secs(10),
        run_dir.clone(),
        Arc::default(),
        Arc::default(),
        writer,
    )
    .expect("the writer starts");
    recorder.set_device_ids((0..DEVICES as u32).map(GpuId::gpu).collect());
    Setup {
        recorder,
        gate,
        run_dir,
        alarms,
        _dir: dir,
    }
}

/// A tick at which every device uses `used`.
fn tick(recorder: &Recorder, unix_nanos: u64, used: u64) {
    let used = [Some(used); DEVICES];
    let totals = [Some(TOTAL); DEVICES];
    recorder.on_tick(&Tick {
        totals: &totals,
        ..Tick::of_devices(unix_nanos, &used)
    });
}

/// A tick time after every other (a millisecond apart): each tick's files and alarm get
/// names of their own.
fn next_time() -> u64 {
    static CLOCK: OnceLock<AtomicU64> = OnceLock::new();
    CLOCK
        .get_or_init(|| AtomicU64::new(crate::util::time::unix_nanos(SystemTime::now())))
        .fetch_add(1_000_000, Ordering::SeqCst)
}

/// `crossings` ticks at which all eight devices cross together, each after one below.
fn cross_together(recorder: &Recorder, crossings: usize) {
    for _ in 0..crossings {
        tick(recorder, next_time(), LOW);
        tick(recorder, next_time(), HIGH);
    }
}

fn files(dir: &Path, prefix: &str) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|entries| entries.filter_map(Result::ok).map(|e| e.path()).collect())
        .unwrap_or_default();
    found.retain(|p| {
        let name = p.file_name().unwrap().to_string_lossy();
        name.starts_with(prefix) && name.ends_with(".json")
    });
    found.sort();
    found
}

fn json(path: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(path).expect("readable"))
        .unwrap_or_else(|e| panic!("{} is whole JSON: {e}", path.display()))
}

fn alarms(dir: &Path) -> Vec<Alarm> {
    files(dir, "rank-")
        .iter()
        .map(|p| serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap())
        .collect()
}

fn oom_files(run_dir: &Path) -> Vec<PathBuf> {
    files(run_dir, "near-oom-")
        .into_iter()
        .filter(|p| json(p)["event"] == event::OOM)
        .collect()
}

fn near_files(run_dir: &Path) -> Vec<PathBuf> {
    files(run_dir, "near-oom-")
        .into_iter()
        .filter(|p| json(p)["event"] == event::NEAR_OOM)
        .collect()
}

fn timeline_of(event: &PendingEvent) -> Option<String> {
    event
        .attributes
        .iter()
        .find(|kv| kv.key.as_str() == attr::GPU_MEMORY_TIMELINE)
        .map(|kv| kv.value.as_str().into_owned())
}

#[test]
fn an_oom_behind_eight_devices_crossing_tick_after_tick_gets_its_alarm_and_file() {
    let setup = recorder_with(write_job);
    let recorder = &setup.recorder;
    cross_together(recorder, 1);
    setup.gate.wait_until_held();
    cross_together(recorder, 2);

    recorder.record_oom("CUDA out of memory. Tried to allocate 2.00 GiB");
    // Returned with the file written and the other ranks told, while the writer is still
    // stuck on the first near-OOM file.
    let oom = oom_files(&setup.run_dir);
    assert_eq!(near_files(&setup.run_dir).len(), 0);
    assert_eq!(oom.len(), 1, "{:?}", files(&setup.run_dir, ""));
    assert_eq!(
        json(&oom[0])["message"],
        "CUDA out of memory. Tried to allocate 2.00 GiB"
    );
    let told: Vec<Alarm> = alarms(&setup.alarms)
        .into_iter()
        .filter(|a| a.event == event::OOM)
        .collect();
    assert_eq!(told.len(), 1, "the OOM's alarm");
    assert_eq!(told[0].limit, Some(TOTAL));

    setup.gate.open();
    assert!(recorder.stop_by(Instant::now() + Duration::from_secs(30)));
    // Three ticks of eight crossings: one batch each, all written, with one alarm each.
    assert_eq!(near_files(&setup.run_dir).len(), 3 * DEVICES);
    let near_alarms = alarms(&setup.alarms)
        .into_iter()
        .filter(|a| a.event == event::NEAR_OOM)
        .count();
    assert_eq!(near_alarms, 3);
    // Every event names a file that is there.
    let pending = recorder.pending();
    assert_eq!(pending.len(), 3 * DEVICES + 1);
    for event in pending.iter() {
        let name = timeline_of(event).expect("each event names its file");
        assert!(setup.run_dir.join(&name).is_file(), "{name}");
    }
}

#[test]
fn near_oom_ticks_beyond_the_queue_get_their_events_without_a_file_and_are_counted() {
    let setup = recorder_with(write_job);
    let recorder = &setup.recorder;
    cross_together(recorder, 1);
    setup.gate.wait_until_held();
    cross_together(recorder, CAPACITY + 3);
    assert_eq!(recorder.queue.dropped(), 3);

    setup.gate.open();
    assert!(recorder.stop_by(Instant::now() + Duration::from_secs(30)));
    assert_eq!(
        files(&setup.run_dir, "near-oom-").len(),
        (1 + CAPACITY) * DEVICES
    );
    let crossings = (1 + CAPACITY + 3) * DEVICES;
    assert_eq!(
        recorder.counts.total(event::NEAR_OOM),
        crossings as u64,
        "every crossing is counted"
    );
    // The latest events wait for their span, the dropped ticks' last: they name no file.
    let pending = recorder.pending();
    assert_eq!(pending.len(), MAX_PENDING.min(crossings));
    let (named, bare) = pending.split_at(pending.len() - 3 * DEVICES);
    assert!(bare.iter().all(|e| timeline_of(e).is_none()));
    for event in named {
        let name = timeline_of(event).expect("a queued tick's event names its file");
        assert!(setup.run_dir.join(name).is_file());
    }
}

#[test]
fn the_line_about_dropped_ticks_is_said_once() {
    let queue = Queue::default();
    let batch = || Batch {
        alarm: None,
        files: Vec::new(),
        done: None,
    };
    assert_eq!(queue.dropped_line(Path::new("runs/r")), None);
    for _ in 0..CAPACITY {
        assert!(queue.offer(batch()));
    }
    assert!(!queue.offer(batch()));
    assert!(!queue.offer(batch()));
    let line = queue.dropped_line(Path::new("runs/r")).expect("said");
    assert!(
        line.contains("runs/r") && line.contains("the crossings of 2 sampler tick(s)"),
        "{line}"
    );
    assert!(!queue.offer(batch()));
    assert_eq!(queue.dropped(), 3);
    assert_eq!(queue.dropped_line(Path::new("runs/r")), None, "said once");
}

#[test]
fn an_oom_while_the_writer_is_stopping_still_gets_its_alarm_and_file() {
    let setup = recorder_with(write_job);
    let recorder = &setup.recorder;
    cross_together(recorder, 1);
    setup.gate.wait_until_held();
    // Stopping gives up on the stuck writer; the program goes on to run out of memory.
    assert!(!recorder.stop_by(Instant::now() + Duration::from_millis(50)));
    recorder.record_oom("out of memory");
    assert_eq!(oom_files(&setup.run_dir).len(), 1);
    assert!(alarms(&setup.alarms).iter().any(|a| a.event == event::OOM));
    setup.gate.open();
}

/// A disk with room for `room` bytes of the file: a write past them fails as on a full
/// disk.
struct FullDisk<W> {
    file: W,
    room: usize,
}

impl<W: std::io::Write> std::io::Write for FullDisk<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.room == 0 {
            return Err(std::io::Error::from_raw_os_error(libc::ENOSPC));
        }
        let n = buf.len().min(self.room);
        let n = self.file.write(&buf[..n])?;
        self.room -= n;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.file.flush()
    }
}

#[test]
fn an_oom_whose_file_meets_a_full_disk_still_tells_the_other_ranks_and_leaves_no_part() {
    // The disk fills 64 bytes into each file: some of it is on disk when the write fails.
    let setup =
        recorder_with(|job: &Job| write_job_through(job, |file| FullDisk { file, room: 64 }));
    setup.gate.open();
    let recorder = &setup.recorder;
    recorder.record_oom("out of memory");
    let told = alarms(&setup.alarms);
    assert!(told.iter().any(|a| a.event == event::OOM), "{told:?}");
    let left: Vec<PathBuf> = std::fs::read_dir(&setup.run_dir)
        .map(|entries| entries.filter_map(Result::ok).map(|e| e.path()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "no part of the file is left: {left:?}");
    let pending = recorder.pending();
    let oom: Vec<&PendingEvent> = pending.iter().filter(|e| e.name == event::OOM).collect();
    assert_eq!(oom.len(), 1);
    assert_eq!(timeline_of(oom[0]), None, "the event names no file");
    drop(pending);
    assert!(recorder.stop_by(Instant::now() + Duration::from_secs(30)));
}

#[test]
fn an_oom_whose_thread_cannot_start_posts_its_alarm_and_leaves_its_file_unwritten() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let alarms_dir = dir.path().join("alarms");
    let board = Board::in_dir(alarms_dir.clone(), 0);
    let writes = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&writes);
    let writer = Arc::new(Writer {
        board: Some(board),
        write: Arc::new(move |job: &Job| {
            counted.fetch_add(1, Ordering::SeqCst);
            write_job(job)
        }),
    });
    let job = Job {
        path: dir.path().join("near-oom-oom.json"),
        event: event::OOM,
        unix_nanos: 1,
        message: Some("out of memory".into()),
        threshold: 0.95,
        device: 0,
        ids: vec![GpuId::gpu(0)],
        used: Some(HIGH),
        limit: Some(TOTAL),
        rise: None,
        rise_span: None,
        open: Vec::new(),
        ring: Arc::default(),
        warning: "written".into(),
    };
    let alarm = Alarm {
        rank: 0,
        host: None,
        event: event::OOM.into(),
        time_unix_nano: 1,
        gpu: GpuId::gpu(0),
        epoch: None,
        step: None,
        peak: Some(HIGH),
        limit: Some(TOTAL),
    };
    let (done, finished) = std::sync::mpsc::sync_channel(1);
    let no_thread = |_: Box<dyn FnOnce() + Send>| Err(std::io::Error::other("no threads left"));
    queue::write_now_spawning(
        &writer,
        Batch {
            alarm: Some(alarm),
            files: vec![job],
            done: Some(done),
        },
        no_thread,
    );
    assert_eq!(alarms(&alarms_dir).len(), 1, "the other ranks are told");
    assert_eq!(
        writes.load(Ordering::SeqCst),
        0,
        "no file is written on the caller"
    );
    assert!(files(dir.path(), "near-oom-").is_empty());
    assert_eq!(
        finished.try_recv(),
        Ok(false),
        "told at once: no file written"
    );
}

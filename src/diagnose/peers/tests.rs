//! Tests of the alarms between ranks: each is heard once, never one's own; a FIFO or a full
//! disk in the job's directory neither blocks nor leaves a part behind; stopping keeps its
//! deadline.

use super::*;
use std::path::Path;

fn board(dir: &Path, rank: i64) -> Board {
    Board {
        dir: dir.join(ALARMS_DIR),
        rank,
        host: Some("node-a".into()),
    }
}

fn alarm(rank: i64, time_unix_nano: u64) -> Alarm {
    Alarm {
        rank,
        host: Some("node-a".into()),
        event: event::OOM.into(),
        time_unix_nano,
        gpu: GpuId::gpu(u32::try_from(rank).unwrap_or_default()),
        epoch: Some(1),
        step: Some(12),
        peak: Some(80 << 30),
        limit: Some(80 << 30),
    }
}

#[test]
fn a_watcher_reads_each_other_ranks_alarm_once_and_never_its_own_or_old_ones() {
    let dir = tempfile::tempdir().unwrap();
    let mut seen = Seen {
        board: board(dir.path(), 0),
        read: Box::new(read_alarm),
        since_unix_nanos: 1_000,
        files: HashSet::new(),
        told: HashSet::new(),
    };
    assert!(seen.poll().is_empty(), "no board yet");
    board(dir.path(), 3).post(&alarm(3, 2_000)).unwrap();
    board(dir.path(), 0).post(&alarm(0, 2_500)).unwrap();
    board(dir.path(), 5).post(&alarm(5, 500)).unwrap();
    assert_eq!(seen.poll(), vec![alarm(3, 2_000)]);
    assert!(seen.poll().is_empty());
    board(dir.path(), 2).post(&alarm(2, 3_000)).unwrap();
    assert_eq!(seen.poll(), vec![alarm(2, 3_000)]);
}

#[test]
fn stopping_gives_up_at_its_deadline_on_a_watcher_stuck_reading_the_job_s_directory() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let board0 = board(dir.path(), 0);
    let now = crate::util::time::unix_nanos(std::time::SystemTime::now());
    board(dir.path(), 1).post(&alarm(1, now)).unwrap();
    // Reading rank 1's alarm never returns until the test lets it, as a read on a
    // shared file system that stopped answering does. The watcher reads the board as
    // soon as it starts, so it is stuck from its first poll.
    let (reading, stuck) = mpsc::channel::<()>();
    let (go_on, release) = mpsc::channel::<()>();
    let read: ReadAlarm = Box::new(move |path: &Path| {
        let _ = reading.send(());
        let _ = release.recv();
        read_alarm(path)
    });
    let watcher = Watcher::start_reading(board0, read, |_, _| {}).expect("the watcher starts");
    stuck
        .recv_timeout(Duration::from_secs(10))
        .expect("the watcher reads the alarm");

    let (stopped, answer) = mpsc::channel();
    let watcher = std::sync::Arc::new(watcher);
    let stopping = std::sync::Arc::clone(&watcher);
    std::thread::spawn(move || {
        let deadline = std::time::Instant::now() + Duration::from_millis(300);
        let _ = stopped.send(stopping.stop_by(deadline));
    });
    let finished = answer
        .recv_timeout(Duration::from_secs(10))
        .expect("stop returned at its deadline while the watcher was stuck");
    assert!(!finished, "stop says it gave up: the read never returned");

    // Let the stuck read go, so the test leaves no thread blocked behind.
    drop(go_on);
}

fn mkfifo(path: &Path) {
    let c_path = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
}

/// Opens `fifo` for writing without waiting, so that a reader blocked opening it goes
/// on; with none, nothing happens.
fn release(fifo: &Path) {
    use std::os::unix::fs::OpenOptionsExt as _;
    let _ = std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(fifo);
}

#[test]
fn a_fifo_among_the_alarms_is_passed_over_and_a_later_alarm_is_still_heard() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let board0 = board(dir.path(), 0);
    std::fs::create_dir_all(&board0.dir).unwrap();
    // Not an alarm a rank posts: opening it for reading would wait for a writer.
    let fifo = board0.dir.join("rank-1-5.json");
    mkfifo(&fifo);
    let (heard, hearing) = mpsc::channel();
    let watcher = Watcher::start(board0, move |_, attributes| {
        let _ = heard.send(attributes);
    })
    .expect("the watcher starts");
    // Posted once the watcher has met the FIFO.
    std::thread::sleep(POLL * 3);
    let now = crate::util::time::unix_nanos(std::time::SystemTime::now());
    board(dir.path(), 3).post(&alarm(3, now)).unwrap();

    let attributes = hearing.recv_timeout(Duration::from_secs(10));
    release(&fifo);
    let attributes = attributes.expect("rank 3's alarm is heard past the FIFO");
    let rank = attributes
        .iter()
        .find(|kv| kv.key.as_str() == attr::ML_RANK);
    assert_eq!(rank.map(|kv| kv.value.clone()), Some(3_i64.into()));
    assert!(hearing.try_recv().is_err(), "the FIFO is no alarm");
    assert!(watcher.stop_by(Instant::now() + Duration::from_secs(10)));
}

#[test]
fn a_fifo_that_takes_an_alarm_s_place_is_read_as_no_alarm_without_waiting() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let fifo = dir.path().join("rank-1-5.json");
    mkfifo(&fifo);
    let (read, answer) = mpsc::channel();
    let reading = fifo.clone();
    std::thread::spawn(move || {
        let _ = read.send(read_alarm(&reading).map_err(|e| e.to_string()));
    });
    let answer = answer.recv_timeout(Duration::from_secs(10));
    release(&fifo);
    assert_eq!(answer.expect("read without waiting for a writer"), Ok(None));
}

/// A disk with room for `room` more bytes.
struct FullDisk {
    file: std::fs::File,
    room: usize,
}

impl std::io::Write for FullDisk {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.room == 0 {
            return Err(std::io::Error::from_raw_os_error(libc::ENOSPC));
        }
        let n = self.file.write(&buf[..buf.len().min(self.room)])?;
        self.room -= n;
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.file.flush()
    }
}

#[test]
fn an_alarm_that_meets_a_full_disk_fails_and_leaves_no_part_behind() {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let board = board(dir.path(), 3);
    let posted = board.post_through(&alarm(3, 7), |file| FullDisk { file, room: 16 });
    let error = posted.expect_err("a full disk fails the post");
    assert_eq!(error.raw_os_error(), Some(libc::ENOSPC));
    let left: Vec<OsString> = std::fs::read_dir(&board.dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(left.is_empty(), "no part of the alarm is left: {left:?}");
}

#[test]
fn an_alarm_says_which_rank_ran_out_where_and_how_full_it_was() {
    assert_eq!(
        alarm(3, 1).describe(),
        "rank 3 (node-a) ran out of device memory at step 12 of epoch 1 \
         (gpu 3: 80.0 GiB peak of 80.0 GiB)"
    );
}

//! Writes the timeline file off the training and sampler threads.
//!
//! The sampler thread only compares the tick with the last figures written and encodes a
//! few bytes when one changed; a `gpuspan-timeline` thread owns the file. The queue between
//! them is bounded: a record that does not fit is counted and folded into the next one (the
//! file then skips that instant, never a change), and the count is reported at the end.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::mpsc::{sync_channel, RecvTimeoutError, SyncSender, TrySendError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use super::file::{figures, header, Encoder, TimelineDevice, TIMELINE_FILE};
use super::{Tick, TickObserver};

/// Records waiting for the file; at 5 ms a full queue is minutes of changes.
const QUEUE: usize = 16 * 1024;

/// The timeline file's observer: owns the encoder and hands records to the writer thread.
pub(crate) struct TimelineWriter {
    encoder: Encoder,
    devices: usize,
    values: Vec<Option<u64>>,
    queue: Option<SyncSender<Vec<u8>>>,
    thread: Option<JoinHandle<std::io::Result<()>>>,
    dropped: u64,
    path: PathBuf,
}

impl TimelineWriter {
    /// Creates `timeline.bin` in `dir` and starts its writer thread.
    pub(crate) fn start(
        dir: &Path,
        devices: &[TimelineDevice],
        interval: Duration,
        origin_unix_nanos: u64,
    ) -> std::io::Result<Self> {
        let path = dir.join(TIMELINE_FILE);
        let mut file = BufWriter::with_capacity(64 * 1024, File::create(&path)?);
        let interval = u64::try_from(interval.as_nanos()).unwrap_or(u64::MAX);
        file.write_all(&header(origin_unix_nanos, interval, devices))?;
        file.flush()?;
        let (queue, records) = sync_channel::<Vec<u8>>(QUEUE);
        let thread = std::thread::Builder::new()
            .name("gpuspan-timeline".into())
            .spawn(move || {
                // At most a second of samples is lost if the process is killed.
                let mut flushed = Instant::now();
                loop {
                    match records.recv_timeout(Duration::from_secs(1)) {
                        Ok(record) => file.write_all(&record)?,
                        Err(RecvTimeoutError::Timeout) => {}
                        Err(RecvTimeoutError::Disconnected) => break,
                    }
                    if flushed.elapsed() >= Duration::from_secs(1) {
                        file.flush()?;
                        flushed = Instant::now();
                    }
                }
                file.flush()
            })?;
        let series = figures(devices.len()).len();
        Ok(Self {
            encoder: Encoder::new(origin_unix_nanos, series),
            devices: devices.len(),
            values: vec![None; series],
            queue: Some(queue),
            thread: Some(thread),
            dropped: 0,
            path,
        })
    }

    /// Closes the queue, waits for the file and says what went wrong, if anything.
    fn finish(&mut self) {
        self.queue = None;
        let Some(thread) = self.thread.take() else {
            return;
        };
        match thread.join() {
            Ok(Ok(())) => {}
            Ok(Err(e)) => eprintln!(
                "gpuspan: warning: the timeline {} is incomplete: {e}",
                self.path.display()
            ),
            Err(_) => eprintln!(
                "gpuspan: warning: the timeline writer for {} stopped",
                self.path.display()
            ),
        }
        if self.dropped > 0 {
            eprintln!(
                "gpuspan: warning: the timeline {} skipped {} samples (its disk was too slow); \
                 each skipped change is in the next record",
                self.path.display(),
                self.dropped
            );
        }
    }
}

impl TickObserver for TimelineWriter {
    fn on_tick(&mut self, tick: &Tick<'_>) {
        let n = self.devices;
        for i in 0..n {
            self.values[i] = tick.devices.get(i).copied().flatten();
            self.values[n + i] = tick.totals.get(i).copied().flatten();
        }
        self.values[2 * n] = tick.process_gpu;
        self.values[2 * n + 1] = tick.host_rss;
        self.values[2 * n + 2] = tick.allocated;
        self.values[2 * n + 3] = tick.reserved;
        let Some(queue) = &self.queue else {
            return;
        };
        let Some(record) = self.encoder.record(tick.unix_nanos, &self.values) else {
            return;
        };
        match queue.try_send(record) {
            Ok(()) => self.encoder.commit(tick.unix_nanos, &self.values),
            Err(TrySendError::Full(_)) => self.dropped += 1,
            // The writer thread ended on an I/O error: reported by `finish`.
            Err(TrySendError::Disconnected(_)) => self.queue = None,
        }
    }

    fn on_stop(&mut self) {
        self.finish();
    }
}

impl Drop for TimelineWriter {
    fn drop(&mut self) {
        self.finish();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::timeline::file::{read_timeline, Figure};

    #[test]
    fn ticks_reach_the_file_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let devices = [TimelineDevice {
            id: crate::record::GpuId::gpu(0),
            uuid: "GPU-0".into(),
            name: "Test".into(),
        }];
        let origin = 1_800_000_000_000_000_000;
        let mut writer =
            TimelineWriter::start(dir.path(), &devices, Duration::from_millis(5), origin).unwrap();
        for i in 0..1000u64 {
            let used = [Some(1000 + (i / 10) * 7)];
            let totals = [Some(80_000)];
            writer.on_tick(&Tick {
                unix_nanos: origin + i * 5_000_000,
                devices: &used,
                totals: &totals,
                process_gpu: None,
                process_resolution_ns: None,
                host_rss: Some(5000),
                allocated: None,
                reserved: None,
            });
        }
        writer.on_stop();
        let timeline = read_timeline(&dir.path().join(TIMELINE_FILE)).unwrap();
        let used = &timeline.figure(Figure::DeviceUsed(0)).unwrap().points;
        assert_eq!(used.len(), 100);
        assert_eq!(used[0], (origin, Some(1000)));
        assert_eq!(used[99], (origin + 990 * 5_000_000, Some(1000 + 99 * 7)));
        assert_eq!(
            timeline.figure(Figure::HostRss).unwrap().points,
            vec![(origin, Some(5000))]
        );
    }
}

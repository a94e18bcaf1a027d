//! The program's own out-of-memory errors: [`record_oom`], called by the program or by the
//! panic hook on a panic that reads as one, writes the file on a thread of its own and waits
//! for it, since the process may be about to die. The recorders of every running telemetry
//! are kept here for it.

use std::sync::mpsc;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, SystemTime};

use super::finding::fullness;
use super::queue::{write_now, Batch};
use super::Recorder;
use crate::names::event;
use crate::util::sync::lock;

/// Recorders of the running telemetries, for [`record_oom`] and the panic hook.
static RECORDERS: Mutex<Vec<Weak<Recorder>>> = Mutex::new(Vec::new());

/// Keeps `recorder` for [`record_oom`] and installs the panic hook, once.
pub(super) fn register(recorder: &Arc<Recorder>) {
    let mut recorders = lock(&RECORDERS);
    recorders.retain(|r| r.strong_count() > 0);
    recorders.push(Arc::downgrade(recorder));
    install_panic_hook();
}

impl Recorder {
    /// The program ran out of memory: record it on the fullest device and wait (up to a
    /// few seconds) until the file is on disk, since the process may be about to die.
    pub(super) fn record_oom(&self, message: &str) {
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
}

/// How long `record_oom` waits for its file: the process may be about to die, but a file
/// system that hangs must not hang it.
const OOM_WAIT: Duration = Duration::from_secs(5);

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
            .downcast_ref::<crate::diagnose::OpenSpanLayer>()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn out_of_memory_panics_are_recognised() {
        assert!(is_oom_message(
            "CUDA out of memory. Tried to allocate 2.00 GiB"
        ));
        assert!(is_oom_message("DriverError(CUDA_ERROR_OUT_OF_MEMORY)"));
        assert!(!is_oom_message("index out of bounds"));
    }
}

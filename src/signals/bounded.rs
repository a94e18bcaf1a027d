//! Runs the flushes side by side within one time bound, and lets an exiting process wait for
//! a flush that a signal started.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::sync::{Condvar, Mutex, Once};
use std::time::{Duration, Instant};

/// A flush to run: returns what went wrong, if anything (the exporter's own error).
pub(super) type Job = Box<dyn FnOnce() -> Result<(), JobError> + Send>;

/// What a flush reports: the SDK's error, passed through as it is.
pub(super) type JobError = Box<dyn std::error::Error + Send + Sync>;

/// How a bounded run ended.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Outcome {
    /// Every job finished in time; the errors they reported, if any.
    Done(Vec<String>),
    /// The bound passed first; the names of the jobs still running (left to finish or
    /// die with the process).
    TimedOut(Vec<&'static str>),
}

/// Runs every job on its own thread and waits for all of them, but never longer than
/// `bound` in total.
pub(super) fn run_within(bound: Duration, jobs: Vec<(&'static str, Job)>) -> Outcome {
    let deadline = Instant::now() + bound;
    let (done, finished) = mpsc::channel();
    let mut running = Vec::new();
    let mut errors = Vec::new();
    for (name, job) in jobs {
        let done = done.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("gpuspan-flush-{name}"))
            .spawn(move || {
                let result = job();
                let _ = done.send((name, result));
            });
        match spawned {
            Ok(_) => running.push(name),
            Err(e) => errors.push(format!("{name}: could not start a thread to flush: {e}")),
        }
    }
    drop(done);
    while !running.is_empty() {
        let left = deadline.saturating_duration_since(Instant::now());
        match finished.recv_timeout(left) {
            Ok((name, result)) => {
                running.retain(|&n| n != name);
                if let Err(e) = result {
                    errors.push(format!("{name}: {e}"));
                }
            }
            Err(_) => return Outcome::TimedOut(running),
        }
    }
    Outcome::Done(errors)
}

/// Flushes asked for by the signal handler, counted there (an atomic add is
/// async-signal-safe), and the count covered by the last flush that finished: a process
/// that exits between the signal and the start of the flush still waits for it.
static REQUESTED: AtomicUsize = AtomicUsize::new(0);
static COMPLETED: Mutex<usize> = Mutex::new(0);
static SETTLED: Condvar = Condvar::new();
/// The most an exit waits, in milliseconds: the flush bound.
static EXIT_BOUND_MS: AtomicU64 = AtomicU64::new(0);
static AT_EXIT: Once = Once::new();

/// Makes a process that calls `exit` (returning from `main`, `std::process::exit`,
/// Python's `sys.exit`) after a signal wait for that signal's flush, up to `bound`.
pub(super) fn wait_at_exit_for_flushes(bound: Duration) {
    let millis = u64::try_from(bound.as_millis()).unwrap_or(u64::MAX);
    EXIT_BOUND_MS.store(millis, Ordering::SeqCst);
    AT_EXIT.call_once(|| {
        // SAFETY: registering a plain `extern "C" fn()` has no other precondition. A
        // failure to register only loses the wait.
        unsafe { libc::atexit(wait_at_exit) };
    });
}

/// Counts a flush asked for. Async-signal-safe: called from the signal handler.
pub(super) fn requested() {
    REQUESTED.fetch_add(1, Ordering::SeqCst);
}

/// Called by the flusher before it flushes: the requests this flush covers.
pub(super) fn covering() -> usize {
    REQUESTED.load(Ordering::SeqCst)
}

/// Called by the flusher after it flushed: releases anyone waiting at exit.
pub(super) fn finished(covered: usize) {
    let mut completed = COMPLETED.lock().unwrap_or_else(|p| p.into_inner());
    *completed = (*completed).max(covered);
    SETTLED.notify_all();
}

/// Blocks until every flush asked for so far has finished, or `bound` has passed.
pub(super) fn wait_for_flushes(bound: Duration) {
    let deadline = Instant::now() + bound;
    let wanted = REQUESTED.load(Ordering::SeqCst);
    let mut completed = COMPLETED.lock().unwrap_or_else(|p| p.into_inner());
    while *completed < wanted {
        let left = deadline.saturating_duration_since(Instant::now());
        if left == Duration::ZERO {
            break;
        }
        completed = match SETTLED.wait_timeout(completed, left) {
            Ok((guard, _)) => guard,
            Err(poisoned) => poisoned.into_inner().0,
        };
    }
}

/// Shutdowns under way (`Telemetry::shutdown`, or a drop on the way out): a signal's flush
/// waits for them instead of racing them, so that the default action that follows it does
/// not end the process halfway through the exit's own export.
static SHUTDOWNS: Mutex<usize> = Mutex::new(0);
static SHUTDOWN_ENDED: Condvar = Condvar::new();

/// Marks a shutdown under way until dropped.
#[derive(Debug)]
pub(crate) struct ShutdownUnderWay(());

impl ShutdownUnderWay {
    pub(crate) fn begin() -> Self {
        *SHUTDOWNS.lock().unwrap_or_else(|p| p.into_inner()) += 1;
        Self(())
    }
}

impl Drop for ShutdownUnderWay {
    fn drop(&mut self) {
        let mut under_way = SHUTDOWNS.lock().unwrap_or_else(|p| p.into_inner());
        *under_way = under_way.saturating_sub(1);
        SHUTDOWN_ENDED.notify_all();
    }
}

/// Blocks while a shutdown is under way, but never longer than `bound`.
pub(super) fn wait_for_shutdowns(bound: Duration) {
    let deadline = Instant::now() + bound;
    let mut under_way = SHUTDOWNS.lock().unwrap_or_else(|p| p.into_inner());
    while *under_way > 0 {
        let left = deadline.saturating_duration_since(Instant::now());
        if left == Duration::ZERO {
            break;
        }
        under_way = match SHUTDOWN_ENDED.wait_timeout(under_way, left) {
            Ok((guard, _)) => guard,
            Err(poisoned) => poisoned.into_inner().0,
        };
    }
}

extern "C" fn wait_at_exit() {
    // Unwinding out of an `extern "C"` function aborts: keep any panic in here.
    let bound = Duration::from_millis(EXIT_BOUND_MS.load(Ordering::SeqCst));
    let _ = std::panic::catch_unwind(|| wait_for_flushes(bound));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sleeper(time: Duration) -> Job {
        Box::new(move || {
            std::thread::sleep(time);
            Ok(())
        })
    }

    #[test]
    fn jobs_run_side_by_side() {
        let started = Instant::now();
        let outcome = run_within(
            Duration::from_secs(5),
            vec![
                ("traces", sleeper(Duration::from_millis(400))),
                ("metrics", sleeper(Duration::from_millis(400))),
            ],
        );
        assert_eq!(outcome, Outcome::Done(vec![]));
        let took = started.elapsed();
        assert!(took < Duration::from_millis(750), "took {took:?}");
    }

    #[test]
    fn the_bound_holds_for_all_jobs_together() {
        let started = Instant::now();
        let outcome = run_within(
            Duration::from_millis(300),
            vec![
                ("traces", sleeper(Duration::from_millis(200))),
                ("metrics", sleeper(Duration::from_secs(30))),
            ],
        );
        assert_eq!(outcome, Outcome::TimedOut(vec!["metrics"]));
        let took = started.elapsed();
        assert!(took < Duration::from_millis(1000), "took {took:?}");
    }

    #[test]
    fn errors_name_the_job() {
        let failing: Job = Box::new(|| Err("connection refused".into()));
        let outcome = run_within(Duration::from_secs(5), vec![("metrics", failing)]);
        assert_eq!(
            outcome,
            Outcome::Done(vec!["metrics: connection refused".into()])
        );
    }

    #[test]
    fn a_signal_s_flush_waits_for_the_shutdown_under_way_or_its_bound() {
        let shutdown = ShutdownUnderWay::begin();
        let ends = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            drop(shutdown);
        });
        let waited = Instant::now();
        wait_for_shutdowns(Duration::from_secs(30));
        let took = waited.elapsed();
        ends.join().unwrap();
        assert!(took >= Duration::from_millis(150) && took < Duration::from_secs(5));

        // One that never ends: the wait ends at the bound.
        let _stuck = ShutdownUnderWay::begin();
        let waited = Instant::now();
        wait_for_shutdowns(Duration::from_millis(200));
        let took = waited.elapsed();
        assert!(took >= Duration::from_millis(150) && took < Duration::from_secs(5));
    }

    #[test]
    fn the_exit_wait_ends_with_the_flush_or_its_bound() {
        // A signal asked for a flush that has not even started yet.
        requested();
        let covered = covering();
        let flusher = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(200));
            finished(covered);
        });
        let waited = Instant::now();
        wait_for_flushes(Duration::from_secs(30));
        let took = waited.elapsed();
        assert!(took >= Duration::from_millis(150) && took < Duration::from_secs(5));
        flusher.join().unwrap();

        // Nothing asked for since: no wait at all.
        let waited = Instant::now();
        wait_for_flushes(Duration::from_secs(30));
        assert!(waited.elapsed() < Duration::from_millis(100));

        // A flush that never finishes: the wait ends at the bound.
        requested();
        let waited = Instant::now();
        wait_for_flushes(Duration::from_millis(200));
        let took = waited.elapsed();
        finished(covering());
        assert!(took >= Duration::from_millis(150) && took < Duration::from_secs(5));
    }
}

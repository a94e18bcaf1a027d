//! A thread that keeps a sampler's schedule and does nothing else: what a sampler's
//! wake-ups cost at the least, and, where even it falls behind, a machine too busy to judge
//! a sampler's cadence by.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The running thread; stopped and joined when dropped.
pub struct IdleTicker {
    stop: Arc<AtomicBool>,
    missed: Arc<AtomicU64>,
    thread: Option<JoinHandle<()>>,
}

impl IdleTicker {
    /// Starts a thread named `name` that wakes every `interval`, as a sampler does.
    pub fn start(name: &str, interval: Duration) -> IdleTicker {
        let stop = Arc::new(AtomicBool::new(false));
        let missed = Arc::new(AtomicU64::new(0));
        let (flag, count) = (Arc::clone(&stop), Arc::clone(&missed));
        let thread = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                let mut next = Instant::now() + interval;
                while !flag.load(Ordering::Relaxed) {
                    let now = Instant::now();
                    if now < next {
                        std::thread::park_timeout(next - now);
                        continue;
                    }
                    next += interval;
                    let now = Instant::now();
                    if next < now {
                        let behind = (now - next).as_nanos() / interval.as_nanos();
                        count.fetch_add(1 + behind as u64, Ordering::Relaxed);
                        next = now + interval;
                    }
                }
            })
            .expect("spawn the idle ticker");
        IdleTicker {
            stop,
            missed,
            thread: Some(thread),
        }
    }

    /// The slots it could not keep so far.
    pub fn missed(&self) -> u64 {
        self.missed.load(Ordering::Relaxed)
    }
}

impl Drop for IdleTicker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            thread.thread().unpark();
            let _ = thread.join();
        }
    }
}

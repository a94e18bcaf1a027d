//! A mutex lock that survives a panicked holder: every lock in gpuspan guards plain data
//! that stays consistent between statements, and a panic elsewhere must not turn into one
//! here.

use std::sync::{Mutex, MutexGuard};

/// Locks `mutex`, taking the data even when a holder panicked.
pub fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

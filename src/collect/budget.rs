//! The forward queue's admission rule: room in bytes of decoded requests (see
//! [`super::size`]). A request holds its share from the moment it is accepted until it is
//! sent or given up, so what waits, and what is being sent, never holds more than the bound;
//! a request that finds no room is refused (the receiver answers "retry later").
//!
//! Threading: the receiver's handlers take room on any runtime thread; the room goes back
//! wherever the request is dropped (the export queue's thread, or a send task).

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// See the module docs.
#[derive(Debug, Clone)]
pub(crate) struct Budget {
    room: Arc<Semaphore>,
    total: usize,
}

impl Budget {
    pub(crate) fn new(total: usize) -> Self {
        let total = total.clamp(1, Semaphore::MAX_PERMITS);
        Self {
            room: Arc::new(Semaphore::new(total)),
            total,
        }
    }

    /// Room for a request of `bytes`, or `None` when the queue is too full for it. A request
    /// larger than the whole bound takes all of it, so it is accepted when the queue is empty.
    pub(crate) fn take(&self, bytes: usize) -> Option<OwnedSemaphorePermit> {
        let share = bytes.min(self.total).min(u32::MAX as usize) as u32;
        Arc::clone(&self.room).try_acquire_many_owned(share).ok()
    }

    /// Bytes free now.
    pub(crate) fn free(&self) -> usize {
        self.room.available_permits()
    }

    /// The bound.
    pub(crate) fn total(&self) -> usize {
        self.total
    }
}

/// A request in the queue with the room it holds (none for the collector's own `run` span,
/// which must never be refused). Dropping it frees the request, then gives its room back.
#[derive(Debug)]
pub(crate) struct Held<R: Default> {
    request: R,
    room: Option<OwnedSemaphorePermit>,
}

impl<R: Default> Held<R> {
    pub(crate) fn new(request: R, room: Option<OwnedSemaphorePermit>) -> Self {
        Self { request, room }
    }

    pub(crate) fn request(&self) -> &R {
        &self.request
    }

    pub(crate) fn request_mut(&mut self) -> &mut R {
        &mut self.request
    }
}

impl<R: Default> Drop for Held<R> {
    fn drop(&mut self) {
        drop(std::mem::take(&mut self.request));
        let freed = self.room.take().map_or(0, |room| room.num_permits());
        give_back_memory(freed);
    }
}

/// Gives the memory of a large request that was just freed back to the system. glibc keeps
/// freed memory in per-thread arenas; requests decoded on one thread and freed on another
/// would otherwise leave the process's resident size well above what it holds. Runs off the
/// runtime's threads, as trimming walks the free lists.
pub(crate) fn give_back_memory(freed: usize) {
    const WORTH_IT: usize = 4 << 20;
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    if freed >= WORTH_IT {
        // SAFETY: malloc_trim only returns free memory to the system.
        let trim = || unsafe {
            libc::malloc_trim(0);
        };
        if tokio::runtime::Handle::try_current().is_ok() {
            drop(tokio::task::spawn_blocking(trim));
        } else {
            trim();
        }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    let _ = (freed, WORTH_IT);
}

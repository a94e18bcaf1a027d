//! The forward queue's admission rule: room in bytes of decoded requests (see
//! [`super::size`]). A request takes room for what decoding it will allocate before it is
//! decoded ([`super::bound`]), keeps what it holds once decoded and given its memory
//! figures, and holds it until it is sent or given up; so what is being decoded, what
//! waits and what is being sent never hold more than the bound. A request that finds no
//! room is refused (the receiver answers "retry later"); one larger than the whole bound
//! is refused for good (too large).
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

/// Why room was not given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NoRoom {
    /// More than the whole bound: it never fits.
    TooLarge,
    /// Not now: the queue holds too much.
    Full,
}

impl Budget {
    pub(crate) fn new(total: usize) -> Self {
        let total = total.clamp(1, Semaphore::MAX_PERMITS);
        Self {
            room: Arc::new(Semaphore::new(total)),
            total,
        }
    }

    /// Room for `bytes`, if the queue has that much free.
    pub(crate) fn take(&self, bytes: usize) -> Result<Room, NoRoom> {
        if bytes > self.total {
            return Err(NoRoom::TooLarge);
        }
        let mut held = Arc::clone(&self.room)
            .try_acquire_many_owned(0)
            .map_err(|_| NoRoom::Full)?;
        let mut left = bytes;
        while left > 0 {
            // A semaphore hands out at most `u32::MAX` permits at a time.
            let part = left.min(u32::MAX as usize);
            let more = Arc::clone(&self.room)
                .try_acquire_many_owned(part as u32)
                .map_err(|_| NoRoom::Full)?;
            held.merge(more);
            left -= part;
        }
        Ok(Room {
            held,
            budget: self.clone(),
        })
    }

    /// The bound.
    pub(crate) fn total(&self) -> usize {
        self.total
    }
}

/// Room held in the queue's bound, resized as what it holds is known better.
#[derive(Debug)]
pub(crate) struct Room {
    held: OwnedSemaphorePermit,
    budget: Budget,
}

impl Room {
    /// Bytes held.
    pub(crate) fn bytes(&self) -> usize {
        self.held.num_permits()
    }

    /// Holds `bytes`: gives back what is held beyond, or takes what is missing (keeping
    /// what it held when that is not free).
    pub(crate) fn resize(&mut self, bytes: usize) -> Result<(), NoRoom> {
        let held = self.bytes();
        if bytes <= held {
            drop(self.held.split(held - bytes));
            return Ok(());
        }
        if bytes > self.budget.total {
            return Err(NoRoom::TooLarge);
        }
        let more = self.budget.take(bytes - held)?;
        self.held.merge(more.into_permit());
        Ok(())
    }

    fn into_permit(self) -> OwnedSemaphorePermit {
        self.held
    }
}

/// A request in the queue with the room it holds (none for the collector's own `run` span,
/// which must never be refused). Dropping it frees the request, then gives its room back.
#[derive(Debug)]
pub(crate) struct Held<R: Default> {
    request: R,
    room: Option<Room>,
}

impl<R: Default> Held<R> {
    pub(crate) fn new(request: R, room: Option<Room>) -> Self {
        Self { request, room }
    }

    /// Holds `bytes` from now on, what the request was measured to hold; room it cannot
    /// get is not taken (the request is already in the queue).
    pub(crate) fn settle(&mut self, bytes: usize) {
        if let Some(room) = &mut self.room {
            let _ = room.resize(bytes);
        }
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
        let freed = self.room.take().map_or(0, |room| room.bytes());
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

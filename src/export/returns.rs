//! Emptied lists handed back to the threads that end spans, to be freed there.
//!
//! The OTel layer allocates a span's attribute list on the training thread, and the guard
//! its per-device figures; the export thread replaces the first with a longer list and is
//! done with the second. With glibc's allocator, freeing them on
//! the export thread takes the training thread's arena lock, and the training thread's next
//! allocation of that size then misses its thread cache and takes the lock too: the two
//! threads contend, and the training thread pays futex wake-ups for it. Freed on the thread
//! that ends spans instead, the list goes to that thread's cache, and the next span's list
//! comes from there.
//!
//! Neither side ever waits: both only `try_lock`, the export thread keeps what it could not
//! hand over for its next try, and past a bound it frees lists itself.

use std::sync::Mutex;

use opentelemetry::KeyValue;

use crate::figures::Triple;

/// A list allocated where spans end, emptied on the export thread.
#[derive(Debug)]
#[allow(
    dead_code,
    reason = "held only to be freed on a thread that ends spans"
)]
pub(crate) enum Returned {
    Attributes(Vec<KeyValue>),
    Devices(Vec<Triple>),
}

/// Lists waiting to be freed; more than this and the export thread frees them itself.
const MOST: usize = 4096;
/// Lists a thread frees each time it ends a span (more than a span returns: the pile
/// drains).
const PER_SPAN: usize = 4;

#[derive(Debug, Default)]
pub(crate) struct Returns {
    pile: Mutex<Vec<Returned>>,
}

impl Returns {
    /// Export thread: moves `held` onto the pile if the pile is free right now.
    pub(crate) fn hand_back(&self, held: &mut Vec<Returned>) {
        if held.is_empty() {
            return;
        }
        if let Ok(mut pile) = self.pile.try_lock() {
            let room = MOST.saturating_sub(pile.len());
            let moved = held.len().min(room);
            pile.extend(held.drain(..moved));
        }
        if held.len() > MOST {
            // Nobody ends spans any more: free here.
            held.clear();
        }
    }

    /// Thread ending a span: frees a few returned lists, if the pile is free right now.
    pub(crate) fn free_some(&self) {
        if let Ok(mut pile) = self.pile.try_lock() {
            for _ in 0..PER_SPAN {
                if pile.pop().is_none() {
                    break;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_handed_back_are_freed_by_the_span_ending_side_and_never_pile_up() {
        let returns = Returns::default();
        let mut held: Vec<Returned> = (0..10)
            .map(|_| Returned::Attributes(Vec::with_capacity(18)))
            .collect();
        returns.hand_back(&mut held);
        assert!(held.is_empty());
        for _ in 0..3 {
            returns.free_some();
        }
        assert!(returns.pile.lock().unwrap().is_empty());
        // A full pile takes no more, and the export thread frees the rest itself.
        let mut held: Vec<Returned> = (0..MOST * 2 + 1)
            .map(|_| Returned::Devices(Vec::new()))
            .collect();
        returns.hand_back(&mut held);
        assert_eq!(returns.pile.lock().unwrap().len(), MOST);
        assert!(held.is_empty());
    }
}

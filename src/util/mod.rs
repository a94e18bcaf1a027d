//! Small helpers every floor may use: byte counts for people, wall-clock time, and a lock
//! that survives a panicked holder. Imports nothing of the crate.

pub(crate) mod bytes;
pub(crate) mod sync;
pub(crate) mod time;

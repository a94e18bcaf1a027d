//! Small helpers every floor may use: byte counts for people, wall-clock time, and a lock
//! that survives a panicked holder. Imports nothing of the crate.

// Public through `runlog::bytes`, for the command's reports.
pub mod bytes;
pub(crate) mod sync;
pub(crate) mod time;

//! Small helpers every floor may use: byte counts and energy for people, wall-clock time, and a lock
//! that survives a panicked holder. Imports nothing of the crate.

// Public through `runlog::bytes`, for the command's reports.
pub mod bytes;
// Public through `runlog::energy`, likewise.
pub mod energy;
pub(crate) mod sync;
pub(crate) mod time;

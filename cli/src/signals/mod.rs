//! Signals while `gpuspan run`'s command runs: passed on to it (`forward.rs`).

pub(crate) mod forward;

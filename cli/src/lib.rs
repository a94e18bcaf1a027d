//! The `gpuspan` command, as a library: `run`, `collect`, `report`, `watch` and `selftest`,
//! built on the gpuspan SDK.
//!
//! The `gpuspan` binary and the Python package's `gpuspan` command both call
//! [`cli::main`]/[`cli::exit_status`], so they run the same code. The command line is the
//! promise; this library is how the binary and the Python package reach it, and its Rust
//! API may change in any release. A Rust program that traces its own training loop needs
//! only the `gpuspan` crate.
//!
//! - [`collect`]: `gpuspan collect` and `gpuspan run`, an OTLP receiver that puts GPU
//!   memory on other programs' spans, built on `gpuspan::pipeline`.
//! - [`report`]: `gpuspan report`'s page, SVG and PNG pictures, drawn from a run directory
//!   read back through `gpuspan::runlog`.
//! - [`diff`]: `gpuspan diff BASE NEW`, two runs compared by phase, device, epoch and step.
//! - `selftest`: `gpuspan selftest`, which allocates through the CUDA driver (cudarc,
//!   loaded at run time) and reads its own spans back.

#![warn(missing_docs, unreachable_pub, clippy::undocumented_unsafe_blocks)]

pub mod cli;
pub mod collect;
pub mod diff;
pub mod report;
mod selftest;
mod signals;
mod util;

//! `gpuspan diff`'s arguments and what it prints, so that the command line adds one
//! variant and one call.

use std::path::PathBuf;

use super::{Diff, MaxIncrease};

/// `gpuspan diff BASE NEW [--max-increase LIMITS]... [--markdown | --json]`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The run compared against: a run directory, a job's directory or an OTLP/JSON traces
    /// file.
    base: PathBuf,
    /// The run to check, in any of the same forms.
    new: PathBuf,
    /// How much a figure may grow before the command exits 1: `5%` or `512MiB` for the
    /// peak, or by figure, such as peak=5%,growth=256MiB (figures: peak, growth,
    /// allocator_peak, non_allocator_peak, bytes_per_sample, and energy, by a percentage
    /// only: energy=10%). Energy is compared but not held to a limit unless named. May be
    /// repeated.
    #[arg(long, value_name = "LIMITS")]
    max_increase: Vec<String>,
    /// Prints Markdown, for a pull request's comment.
    #[arg(long, conflicts_with = "json")]
    markdown: bool,
    /// Prints JSON (the shape docs/diff.md describes).
    #[arg(long)]
    json: bool,
}

/// Runs `gpuspan diff`: 0 within the limits, 1 past one, 2 on bad input.
pub fn run(args: &Args) -> u8 {
    let mut limits = MaxIncrease::default();
    for text in &args.max_increase {
        if let Err(e) = limits.add(text) {
            eprintln!("gpuspan diff: {e}");
            return 2;
        }
    }
    match Diff::compare(&args.base, &args.new, limits) {
        Ok(diff) => {
            if args.json {
                println!("{}", diff.to_json());
            } else if args.markdown {
                print!("{}", diff.markdown());
            } else {
                print!("{}", diff.table());
            }
            diff.exit_code()
        }
        Err(e) => {
            eprintln!("gpuspan diff: {e}");
            2
        }
    }
}

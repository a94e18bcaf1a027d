//! The `gpuspan` command line, as a library function so that both the `gpuspan` binary and
//! the Python package's `gpuspan` command run the same code: `report` draws a run
//! directory's per-epoch table; `watch` prints every device's memory, live; `collect` and
//! `run` put GPU memory on other programs' spans.

mod args;
mod collect;
mod error;
mod report;
mod selftest;
mod watch;

use std::process::ExitCode;

use clap::Parser;

use args::{Cli, Command};
use collect::Limits;
pub use error::CommandError;
pub use report::runs_in;
use report::Pictures;

/// Runs the command line with `args` (the program name first, as in `std::env::args_os`),
/// printing to standard output and errors to standard error.
///
/// Help, version and usage errors are printed and exit the process, as a command does.
pub fn main<I, T>(args: I) -> ExitCode
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    ExitCode::from(exit_status(args))
}

/// As [`main`], returning the exit status itself: `gpuspan run` passes on the command's
/// (0 to 255, or 128 + the signal that ended it), so that a caller that is not a `main`
/// (the Python wheel's command) can pass it on too.
pub fn exit_status<I, T>(args: I) -> u8
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let cli = Cli::parse_from(args);
    let result = match cli.command {
        Command::Report {
            dir,
            html,
            svg,
            png,
            width,
        } => {
            let pictures = Pictures {
                html,
                svg,
                png,
                width,
            };
            report::report(dir, &pictures)
        }
        Command::Diff(args) => return crate::diff::cli::run(&args),
        Command::Watch { every, count } => watch::watch(every, count),
        Command::Selftest { mib, interval } => return selftest::selftest(mib, interval),
        Command::Collect {
            grpc,
            http,
            max_request_bytes,
            max_queue_bytes,
            max_concurrent_requests,
            max_connections,
            tls_cert,
            tls_key,
        } => collect::collect(
            grpc.0,
            http.0,
            Limits {
                max_request_bytes,
                max_queue_bytes,
                max_concurrent_requests,
                max_connections,
            },
            tls_cert.zip(tls_key),
        ),
        Command::Run { protocol, command } => {
            return match crate::collect::run(&command, protocol) {
                Ok(outcome) => {
                    eprint!("{}", outcome.summary);
                    u8::try_from(outcome.exit_code.clamp(0, 255)).unwrap_or(1)
                }
                Err(e) => {
                    eprintln!("gpuspan run: {e}");
                    127
                }
            };
        }
    };
    match result {
        Ok(()) => 0,
        Err(message) => {
            eprintln!("gpuspan: {message}");
            1
        }
    }
}

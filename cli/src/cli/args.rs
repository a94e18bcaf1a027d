//! What the command line says, as clap reads it: each command with its flags, their help
//! and their parsers. Running the commands is the parent module's business.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "gpuspan", version, about = "GPU memory on OpenTelemetry")]
pub(super) struct Cli {
    #[command(subcommand)]
    pub(super) command: Command,
}

#[derive(Subcommand)]
pub(super) enum Command {
    /// Prints the per-epoch table of a run directory (default: the newest run in
    /// $GPUSPAN_RUN_DIR or gpuspan-runs), or draws it as a page or a picture.
    Report {
        /// A run directory, a job's directory (a rank-<r> run per rank), or a directory of
        /// runs (its newest run is shown).
        dir: Option<PathBuf>,
        /// Writes a self-contained HTML page (default: report.html in the run directory; for
        /// a job, the job's page with a lane per rank in the job's directory, and each
        /// rank's own page in its directory).
        #[arg(long, num_args = 0..=1, value_name = "FILE")]
        html: Option<Option<PathBuf>>,
        /// Writes the picture as SVG.
        #[arg(long, value_name = "FILE")]
        svg: Option<PathBuf>,
        /// Writes the picture as PNG (rendered without a browser).
        #[arg(long, value_name = "FILE")]
        png: Option<PathBuf>,
        /// Width of the SVG or PNG picture, in pixels.
        #[arg(long, default_value_t = 1400)]
        width: u32,
    },
    /// Proves the peak on this machine's GPUs: allocates a known amount on each device
    /// through the CUDA driver, holds it, frees it, and checks that the span's peak and this
    /// process's figures saw it. Exits 1 when a check fails, 2 when there is no GPU to test.
    Selftest {
        /// MiB to allocate on each device (at most half of its free memory).
        #[arg(long, default_value_t = 1024, value_parser = clap::value_parser!(u64).range(1..))]
        mib: u64,
        /// The sampling interval to test (as `GPUSPAN_SAMPLE_INTERVAL` takes it).
        #[arg(long, default_value = gpuspan::settings::DEFAULT_SAMPLE_INTERVAL_TEXT, value_parser = parse_sample_interval)]
        interval: Duration,
    },
    /// Compares two runs (run directories, job directories or OTLP/JSON traces files) by
    /// phase, device, epoch and step. Exits 1 when a figure grew past --max-increase, 2 on
    /// bad input.
    Diff(crate::diff::cli::Args),
    /// Prints each device's memory every interval until interrupted.
    Watch {
        /// Time between lines, such as 500ms or 2s (at least 10ms, at most a day).
        #[arg(long, default_value = "1s", value_parser = parse_interval)]
        every: Duration,
        /// Stop after this many lines (default: never).
        #[arg(long)]
        count: Option<u64>,
    },
    /// Receives OTLP (gRPC and HTTP, protobuf or JSON), puts GPU memory on every span by its
    /// own start and end time, and forwards to OTEL_EXPORTER_OTLP_ENDPOINT or the run
    /// directory. Stops on SIGINT or SIGTERM.
    Collect {
        /// Where to receive OTLP/gRPC ("off": not at all).
        #[arg(long, default_value = crate::collect::DEFAULT_GRPC_ADDR, value_parser = parse_addr)]
        grpc: Listen,
        /// Where to receive OTLP/HTTP ("off": not at all).
        #[arg(long, default_value = crate::collect::DEFAULT_HTTP_ADDR, value_parser = parse_addr)]
        http: Listen,
        /// The largest request accepted, in bytes (compressed and decompressed).
        #[arg(long, default_value_t = crate::collect::DEFAULT_MAX_REQUEST_BYTES)]
        max_request_bytes: usize,
        /// The bound of the forward queue, in bytes of decoded requests (their spans' GPU
        /// memory figures included): what is being decoded, waits and is being sent. Past
        /// it requests are refused with HTTP 503 / gRPC UNAVAILABLE, which OTLP exporters
        /// retry; a request that alone would hold more gets HTTP 413 / gRPC
        /// RESOURCE_EXHAUSTED.
        #[arg(long, default_value_t = crate::collect::DEFAULT_MAX_QUEUE_BYTES)]
        max_queue_bytes: usize,
        /// Requests read, decompressed and decoded at once; more wait their turn. Each
        /// holds up to twice --max-request-bytes (its body, decompressed) besides the queue.
        #[arg(long, default_value_t = crate::collect::DEFAULT_MAX_CONCURRENT_REQUESTS)]
        max_concurrent_requests: usize,
        /// Connections served at once, gRPC and HTTP together; more wait to be accepted.
        /// Each holds at most 512 KiB before a request of it is read.
        #[arg(long, default_value_t = crate::collect::DEFAULT_MAX_CONNECTIONS)]
        max_connections: usize,
        /// Serve both receivers over TLS with this certificate chain (PEM, the server's
        /// certificate first); with --tls-key.
        #[arg(long, requires = "tls_key")]
        tls_cert: Option<std::path::PathBuf>,
        /// The private key (PEM) of --tls-cert.
        #[arg(long, requires = "tls_cert")]
        tls_key: Option<std::path::PathBuf>,
    },
    /// Runs a command with a collector on a free local port: its OpenTelemetry spans get GPU
    /// memory, and a `run` span covers the command. Returns the command's exit code.
    Run {
        /// What the command is told to send: grpc or http/protobuf (both are received).
        #[arg(long, default_value = "grpc")]
        protocol: gpuspan::Protocol,
        /// The command and its arguments, after `--`.
        #[arg(required = true, trailing_var_arg = true, allow_hyphen_values = true)]
        command: Vec<std::ffi::OsString>,
    },
}

/// A listening address, or none (`off`).
#[derive(Debug, Clone, Copy)]
pub(super) struct Listen(pub(super) Option<std::net::SocketAddr>);

fn parse_addr(text: &str) -> Result<Listen, String> {
    if text == "off" {
        return Ok(Listen(None));
    }
    text.parse()
        .map(|addr| Listen(Some(addr)))
        .map_err(|_| format!("'{text}' is not an address such as 127.0.0.1:4317, or off"))
}

/// `--every`: the settings' duration grammar (`5ms`, `500us`, `1s`; a bare number is
/// milliseconds), at least 10 ms. clap names the flag and the value around the message.
fn parse_interval(text: &str) -> Result<Duration, String> {
    const LEAST: Duration = Duration::from_millis(10);
    let interval = gpuspan::settings::duration(text)
        .map_err(|error| format!("expected {}", error.expected()))?;
    if interval < LEAST {
        return Err("expected at least 10ms, such as 500ms or 2s".to_owned());
    }
    Ok(interval)
}

/// `--interval`: as `GPUSPAN_SAMPLE_INTERVAL` takes it (its grammar and its bounds).
fn parse_sample_interval(text: &str) -> Result<Duration, String> {
    gpuspan::settings::sample_interval(text)
        .map_err(|error| format!("expected {}", error.expected()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `gpuspan selftest --interval` takes what `GPUSPAN_SAMPLE_INTERVAL` takes, and its
    /// default is that setting's.
    #[test]
    fn the_selftest_interval_is_the_sample_interval_setting() {
        use clap::Parser;
        let interval = |args: &[&str]| {
            let mut all = vec!["gpuspan", "selftest"];
            all.extend_from_slice(args);
            match Cli::try_parse_from(all) {
                Ok(Cli {
                    command: Command::Selftest { interval, .. },
                    ..
                }) => Ok(interval),
                Ok(_) => panic!("not the selftest"),
                Err(error) => Err(error.to_string()),
            }
        };
        assert_eq!(
            interval(&[]),
            Ok(gpuspan::settings::DEFAULT_SAMPLE_INTERVAL)
        );
        let refused = interval(&["--interval", "50us"]).unwrap_err();
        assert!(refused.contains("at least 100us"), "{refused}");
        assert_eq!(
            interval(&["--interval", "2ms"]),
            Ok(std::time::Duration::from_millis(2))
        );
    }
}

//! The `gpuspan` command line, as a library function so that both the `gpuspan` binary and
//! the Python package's `gpuspan` command run the same code: `report` draws a run
//! directory's per-epoch table; `watch` prints every device's memory, live; `collect` and
//! `run` put GPU memory on other programs' spans.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use gpuspan::runlog;

#[derive(Parser)]
#[command(name = "gpuspan", version, about = "GPU memory on OpenTelemetry")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
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
struct Listen(Option<std::net::SocketAddr>);

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
            report(dir, &pictures)
        }
        Command::Diff(args) => return crate::diff::cli::run(&args),
        Command::Watch { every, count } => watch(every, count),
        Command::Selftest { mib, interval } => return selftest(mib, interval),
        Command::Collect {
            grpc,
            http,
            max_request_bytes,
            max_queue_bytes,
            max_concurrent_requests,
            max_connections,
        } => collect(
            grpc.0,
            http.0,
            Limits {
                max_request_bytes,
                max_queue_bytes,
                max_concurrent_requests,
                max_connections,
            },
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

/// Why a `gpuspan` command failed; printed after `gpuspan: `.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CommandError {
    /// A directory could not be read.
    #[error("cannot read {}: {source}", path.display())]
    ReadDir {
        /// The directory.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A directory holds no run.
    #[error(
        "{} holds no run: expected {} in it, or run directories below it",
        dir.display(),
        runlog::TRACES_FILE
    )]
    NoRun {
        /// The directory.
        dir: PathBuf,
    },
    /// A named picture was asked of a directory of several ranks.
    #[error(
        "{} holds {ranks} ranks: give one rank's directory (such as {}) to draw it into a named file",
        dir.display(),
        first.display()
    )]
    SeveralRanks {
        /// The directory.
        dir: PathBuf,
        /// How many ranks it holds.
        ranks: usize,
        /// The first rank's directory.
        first: PathBuf,
    },
    /// A picture or page could not be written.
    #[error("cannot write {}: {source}", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A run could not be read or drawn.
    #[error(transparent)]
    Report(#[from] crate::report::ReportError),
    /// A run's summary could not be read.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// gpuspan could not start.
    #[error(transparent)]
    Init(#[from] gpuspan::InitError),
    /// gpuspan did not shut down cleanly.
    #[error(transparent)]
    Shutdown(#[from] gpuspan::ShutdownError),
    /// `watch` found no GPU.
    #[error("no GPU to watch (see the warning above)")]
    NoGpu,
    /// The collector could not handle SIGINT and SIGTERM.
    #[error("cannot handle signals: {0}")]
    Signals(#[source] std::io::Error),
    /// The collector could not start.
    #[error(transparent)]
    Collect(#[from] crate::collect::CollectError),
}

/// The run directories to report: `dir` itself, its `rank-*` directories, or the newest run
/// inside a directory of runs.
///
/// # Errors
/// [`CommandError::ReadDir`] when `dir` cannot be read, [`CommandError::NoRun`] when it
/// holds no run.
pub fn runs_in(dir: &Path) -> Result<Vec<PathBuf>, CommandError> {
    if dir.join(runlog::TRACES_FILE).is_file() {
        return Ok(vec![dir.to_path_buf()]);
    }
    let entries = std::fs::read_dir(dir).map_err(|source| CommandError::ReadDir {
        path: dir.to_path_buf(),
        source,
    })?;
    let mut subdirs: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect();
    subdirs.sort();
    let mut ranks: Vec<(Option<u64>, PathBuf)> = subdirs
        .iter()
        .filter_map(|p| {
            let name = p.file_name()?.to_string_lossy();
            let number = name.strip_prefix(runlog::RANK_DIR_PREFIX)?.parse().ok();
            Some((number, p.clone()))
        })
        .filter(|(_, p)| p.join(runlog::TRACES_FILE).is_file())
        .collect();
    // rank-2 before rank-10.
    ranks.sort();
    let ranks: Vec<PathBuf> = ranks.into_iter().map(|(_, p)| p).collect();
    if !ranks.is_empty() {
        return Ok(ranks);
    }
    let newest = subdirs
        .iter()
        .filter_map(|p| Some((p.metadata().ok()?.modified().ok()?, p)))
        .max()
        .map(|(_, p)| p.clone());
    match newest {
        Some(run) => runs_in(&run),
        None => Err(CommandError::NoRun {
            dir: dir.to_path_buf(),
        }),
    }
}

/// What `report` draws besides the table.
struct Pictures {
    html: Option<Option<PathBuf>>,
    svg: Option<PathBuf>,
    png: Option<PathBuf>,
    width: u32,
}

fn write(path: &Path, bytes: &[u8]) -> Result<(), CommandError> {
    std::fs::write(path, bytes).map_err(|source| CommandError::Write {
        path: path.to_path_buf(),
        source,
    })?;
    println!("wrote {}", path.display());
    Ok(())
}

/// Writes the page and pictures of one run.
fn draw(run: &Path, pictures: &Pictures) -> Result<(), CommandError> {
    let drawn = crate::report::Run::read(run)?;
    if let Some(html) = &pictures.html {
        let path = html.clone().unwrap_or_else(|| run.join("report.html"));
        write(&path, crate::report::html(&drawn).as_bytes())?;
    }
    if let Some(path) = &pictures.svg {
        write(path, crate::report::svg(&drawn, pictures.width).as_bytes())?;
    }
    if let Some(path) = &pictures.png {
        let png = crate::report::png(&drawn, pictures.width)?;
        write(path, &png)?;
    }
    Ok(())
}

fn report(dir: Option<PathBuf>, pictures: &Pictures) -> Result<(), CommandError> {
    let dir = dir.unwrap_or_else(runlog::default_run_root);
    let runs = runs_in(&dir)?;
    if pictures.html.is_some() || pictures.svg.is_some() || pictures.png.is_some() {
        let [run] = runs.as_slice() else {
            return draw_job(&dir, &runs, pictures);
        };
        return draw(run, pictures);
    }
    let (summaries, job) = runlog::ranks::read_job(&runs)?;
    for (run, summary) in runs.iter().zip(&summaries) {
        println!("{}", run.display());
        print!("{}", summary.render());
        // A note beside the table (stderr), not a row of it.
        if let Some(line) = runlog::sampler::trust_line(run) {
            eprintln!("{line}");
        }
    }
    if let Some(table) = job.render() {
        print!("{table}");
    }
    Ok(())
}

/// The pages of a job of several ranks: the job's (a lane per rank), then each rank's own in
/// its directory. A named SVG or PNG draws one run, so it needs one rank's directory.
fn draw_job(dir: &Path, runs: &[PathBuf], pictures: &Pictures) -> Result<(), CommandError> {
    if pictures.svg.is_some() || pictures.png.is_some() {
        return Err(CommandError::SeveralRanks {
            ranks: runs.len(),
            first: runs.first().cloned().unwrap_or_default(),
            dir: dir.to_path_buf(),
        });
    }
    let (_, job) = runlog::ranks::read_job(runs)?;
    let name = dir.file_name().map_or_else(
        || dir.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    let path = pictures
        .html
        .clone()
        .flatten()
        .unwrap_or_else(|| dir.join("report.html"));
    write(&path, crate::report::job_html(&job, &name).as_bytes())?;
    let own = Pictures {
        html: Some(None),
        svg: None,
        png: None,
        width: pictures.width,
    };
    for run in runs {
        draw(run, &own)?;
    }
    Ok(())
}

fn watch(every: Duration, count: Option<u64>) -> Result<(), CommandError> {
    let telemetry = gpuspan::Telemetry::builder()
        .traces_exporter(gpuspan::Exporter::None)
        .metrics_exporter(gpuspan::Exporter::None)
        .summary(false)
        .build()?;
    if telemetry.devices().is_empty() {
        return Err(CommandError::NoGpu);
    }
    let mut lines = 0;
    while count.is_none_or(|c| lines < c) {
        let _interval = gpuspan::memory_span!("watch");
        std::thread::sleep(every);
        let cells: Vec<String> = telemetry
            .devices()
            .iter()
            .map(|d| {
                let used = d.used.map_or("-".into(), |b| crate::util::mib(b as f64, 0));
                let total = d
                    .total
                    .map_or("-".into(), |b| crate::util::mib(b as f64, 0));
                format!("gpu {}: {used} / {total}", d.device.id())
            })
            .collect();
        println!("{}", cells.join("   "));
        lines += 1;
    }
    Ok(telemetry.shutdown()?)
}

/// `gpuspan selftest`: the table on standard output; 0 when every check passed, 1 when one
/// failed, 2 when nothing could be tested.
fn selftest(mib: u64, interval: Duration) -> u8 {
    // A directory of its own (new, mode 0700, a name no one can guess), removed on the way
    // out: no other user can prepare it or read the spans.
    use std::os::unix::fs::PermissionsExt;
    let scratch = match tempfile::Builder::new()
        .prefix("gpuspan-selftest-")
        .permissions(std::fs::Permissions::from_mode(0o700))
        .tempdir()
    {
        Ok(scratch) => scratch,
        Err(e) => {
            eprintln!(
                "gpuspan selftest: cannot make a directory for the test's spans under {} \
                 ({e}); set TMPDIR to a writable directory",
                std::env::temp_dir().display()
            );
            return 2;
        }
    };
    let options = crate::selftest::Options {
        bytes: mib.saturating_mul(1 << 20),
        interval,
    };
    let outcome = crate::selftest::run(options, scratch.path());
    drop(scratch);
    match outcome {
        Ok(outcome) => {
            print!("{}", outcome.table);
            if outcome.passed {
                0
            } else {
                1
            }
        }
        Err(e) => {
            eprintln!("gpuspan selftest: {e}");
            2
        }
    }
}

/// What `gpuspan collect` holds at most, from its command line.
struct Limits {
    max_request_bytes: usize,
    max_queue_bytes: usize,
    max_concurrent_requests: usize,
    max_connections: usize,
}

fn collect(
    grpc: Option<std::net::SocketAddr>,
    http: Option<std::net::SocketAddr>,
    limits: Limits,
) -> Result<(), CommandError> {
    use signal_hook::consts::{SIGINT, SIGTERM};
    let mut signals =
        signal_hook::iterator::Signals::new([SIGINT, SIGTERM]).map_err(CommandError::Signals)?;
    let collector = crate::collect::Collector::builder()
        .grpc_addr(grpc)
        .http_addr(http)
        .max_request_bytes(limits.max_request_bytes)
        .max_queue_bytes(limits.max_queue_bytes)
        .max_concurrent_requests(limits.max_concurrent_requests)
        .max_connections(limits.max_connections)
        .start()?;
    let listening: Vec<String> = [
        ("gRPC", collector.grpc_addr()),
        ("HTTP", collector.http_addr()),
    ]
    .iter()
    .filter_map(|(name, addr)| addr.map(|a| format!("{name} on {a}")))
    .collect();
    eprintln!(
        "gpuspan collect: OTLP {}; forwarding to {}",
        listening.join(", "),
        collector.forward_to()
    );
    let _ = signals.forever().next();
    let stats = collector.shutdown(std::time::Duration::from_secs(10));
    eprintln!(
        "gpuspan collect: {} spans received, {} given GPU memory, {} passed unchanged, {} \
         forwarded, {} dropped; {} metric requests; {} requests rejected; {} requests refused \
         while the forward queue was full (their senders retry them)",
        stats.spans_received,
        stats.spans_enriched,
        stats.spans_passed,
        stats.spans_forwarded,
        stats.spans_dropped,
        stats.metric_requests_received,
        stats.requests_rejected,
        stats.requests_refused
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_jobs_ranks_are_read_in_rank_order() {
        let job = tempfile::tempdir().unwrap();
        for rank in [10, 2, 0, 1] {
            let dir = job
                .path()
                .join(format!("{}{rank}", runlog::RANK_DIR_PREFIX));
            std::fs::create_dir(&dir).unwrap();
            std::fs::write(dir.join(runlog::TRACES_FILE), "").unwrap();
        }
        std::fs::create_dir(job.path().join("alarms")).unwrap();
        let names: Vec<String> = runs_in(job.path())
            .unwrap()
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, ["rank-0", "rank-1", "rank-2", "rank-10"]);
    }

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
        assert_eq!(interval(&[]), Ok(gpuspan::DEFAULT_SAMPLE_INTERVAL));
        let refused = interval(&["--interval", "50us"]).unwrap_err();
        assert!(refused.contains("at least 100us"), "{refused}");
        assert_eq!(
            interval(&["--interval", "2ms"]),
            Ok(std::time::Duration::from_millis(2))
        );
    }
}

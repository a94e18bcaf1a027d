// Hand-written: signal-hook's registry calls the program's handler first and forces SA_RESTART.
//! Flush on SIGINT and SIGTERM without changing what the program does with the signal.
//!
//! When one of these signals arrives, a flusher thread exports the completed spans and the
//! metrics, both at once, for at most the export timeout. What the signal does otherwise is
//! the program's business:
//!
//! - **No handler of the program's**: the flush runs, then the signal's default action
//!   follows: the process ends, killed by that signal (exit status 128 + signal in a shell).
//!   A second SIGINT during the flush ends the process at once (a person pressing Ctrl-C
//!   again); a second SIGTERM does not cut the flush short, since launchers send it twice
//!   as a matter of course (to a process and to its group) and the flush is bounded.
//!   If the program is shutting gpuspan down on its way out when the signal comes, the
//!   flush waits for that shutdown to deliver what is left before the default action.
//! - **A handler installed before gpuspan's** (with `sigaction`, `signal`, signal-hook,
//!   Python's `signal.signal`, a framework): gpuspan's handler asks for the flush, then
//!   calls it, with the signature and mask it was installed with, and the process goes on;
//!   the program's handler decides. The flush runs alongside; if that handler exits inside
//!   the handler, the exit waits for the flush it already asked for.
//! - **A handler installed after, with signal-hook** (or anything else that keeps and calls
//!   the previous handler, as signal-hook-registry does): that handler runs and decides;
//!   gpuspan's runs too, sees it is no longer the installed handler, and only flushes.
//! - **A handler installed after, with plain `sigaction` or Python's `signal.signal`** (they
//!   replace the handler and call nothing else): gpuspan does not see the signal at all. The
//!   program's handler decides; flush from the code it wakes with `Telemetry::flush`, or
//!   let `Telemetry` drop on the way out.
//! - **An ignored signal** (`SIG_IGN`, as `nohup` leaves SIGHUP and non-interactive shells
//!   leave SIGINT for background jobs) stays ignored: gpuspan installs nothing for it.
//!
//! If the program exits (returns from `main`, `std::process::exit`, Python's `sys.exit`)
//! after a signal and before that signal's flush is over, the exit waits for the flush, up
//! to its bound.
//! A child made by `fork` (without `exec`) inherits the handler but not the flusher thread;
//! there the handler only passes the signal on as if gpuspan were not installed.
//!
//! The handler does only async-signal-safe things: it writes a byte to a pipe that wakes the
//! flusher, calls the previous handler, and re-raises with `sigaction` and `raise`.

mod bounded;
mod disposition;

pub(crate) use bounded::ShutdownUnderWay;

use std::io::Read;
use std::os::unix::net::UnixStream;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use opentelemetry_sdk::metrics::SdkMeterProvider;
use opentelemetry_sdk::trace::SdkTracerProvider;

use crate::config::{Destination, Settings};

use bounded::{Job, Outcome};

/// How long a flush on a signal may take when nothing is exported over OTLP: writing the run
/// directory is local and quick.
pub(crate) const LOCAL_FLUSH_BOUND: Duration = Duration::from_secs(5);

/// What a shutdown may take beyond the export timeout: a second for the ended spans to
/// settle, and the local bound for the near-OOM files.
const SHUTDOWN_SLACK: Duration = Duration::from_secs(1 + LOCAL_FLUSH_BOUND.as_secs());

/// The longest a flush on a signal may take under `settings`: the larger OTLP export
/// timeout of the two signals, or [`LOCAL_FLUSH_BOUND`] when neither goes over OTLP.
pub(crate) fn flush_bound(settings: &Settings) -> Duration {
    [&settings.traces, &settings.metrics]
        .into_iter()
        .filter_map(|destination| match destination {
            Destination::Otlp(target) => Some(target.timeout),
            _ => None,
        })
        .max()
        .unwrap_or(LOCAL_FLUSH_BOUND)
}

/// What the flusher exports and for how long at most.
struct Target {
    tracer: SdkTracerProvider,
    meter: SdkMeterProvider,
    bound: Duration,
}

static TARGET: Mutex<Option<Target>> = Mutex::new(None);
static FLUSHER: OnceLock<()> = OnceLock::new();

/// Which signals a flush answers.
#[derive(Debug, Clone, Copy)]
pub(crate) enum FlushedOn {
    /// SIGINT and SIGTERM.
    InterruptAndTerminate,
    /// SIGTERM only: for a runtime that turns SIGINT into an exception of its own and
    /// flushes on its way out (Python's `KeyboardInterrupt`).
    Terminate,
}

/// Flushes `tracer` and `meter` on the signals of `on`, within `bound` in total; see the
/// module documentation for what happens to the signal. Calling it again replaces what is
/// flushed.
pub(crate) fn flush_on(
    on: FlushedOn,
    tracer: SdkTracerProvider,
    meter: SdkMeterProvider,
    bound: Duration,
) -> std::io::Result<()> {
    let signals: &[libc::c_int] = match on {
        FlushedOn::InterruptAndTerminate => &disposition::SIGNALS,
        FlushedOn::Terminate => &[libc::SIGTERM],
    };
    flush_on_signals(signals, tracer, meter, bound)
}

fn flush_on_signals(
    signals: &[libc::c_int],
    tracer: SdkTracerProvider,
    meter: SdkMeterProvider,
    bound: Duration,
) -> std::io::Result<()> {
    bounded::wait_at_exit_for_flushes(bound);
    *TARGET.lock().unwrap_or_else(|p| p.into_inner()) = Some(Target {
        tracer,
        meter,
        bound,
    });
    if FLUSHER.get().is_some() {
        return install(signals);
    }
    let (mut wakes, wake) = UnixStream::pair()?;
    wake.set_nonblocking(true)?;
    std::thread::Builder::new()
        .name("gpuspan-signals".into())
        .spawn(move || {
            let mut byte = [0u8];
            while wakes.read_exact(&mut byte).is_ok() {
                on_signal(libc::c_int::from(byte[0]));
            }
        })?;
    // The write end lives as long as the process: the handler may use it at any time.
    let fd = std::os::fd::IntoRawFd::into_raw_fd(wake);
    disposition::set_wake_fd(fd);
    let _ = FLUSHER.set(());
    install(signals)
}

fn install(signals: &[libc::c_int]) -> std::io::Result<()> {
    for &signal in signals {
        disposition::install(signal)?;
    }
    Ok(())
}

/// Runs on the flusher thread for each signal received.
fn on_signal(signal: libc::c_int) {
    let target = TARGET
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .as_ref()
        .map(|t| (t.tracer.clone(), t.meter.clone(), t.bound));
    let covered = bounded::covering();
    disposition::FLUSHING.store(true, std::sync::atomic::Ordering::SeqCst);
    if let Some((tracer, meter, bound)) = target {
        let jobs: Vec<(&'static str, Job)> = vec![
            (
                "traces",
                Box::new(move || tracer.force_flush().map_err(Into::into)),
            ),
            (
                "metrics",
                Box::new(move || meter.force_flush().map_err(Into::into)),
            ),
        ];
        let outcome = bounded::run_within(bound, jobs);
        if let Outcome::TimedOut(pending) = outcome {
            eprintln!(
                "gpuspan: {}: exporting {} did not finish within {bound:?} (the export \
                 timeout); what it held may be lost",
                name(signal),
                pending.join(" and "),
            );
        }
        // A program exiting meanwhile is delivering what is left: the default action waits.
        bounded::wait_for_shutdowns(bound + SHUTDOWN_SLACK);
    }
    // Ends the process unless the program handles the signal. Until then an exit waits
    // (`bounded::wait_at_exit_for_flushes`), so that a program ending on its own at this
    // moment still ends by the signal, as it would without gpuspan.
    disposition::default_action_if_unhandled(signal);
    disposition::FLUSHING.store(false, std::sync::atomic::Ordering::SeqCst);
    bounded::finished(covered);
}

fn name(signal: libc::c_int) -> &'static str {
    match signal {
        libc::SIGINT => "SIGINT",
        libc::SIGTERM => "SIGTERM",
        _ => "signal",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{resolve, CodeSettings, Exporter, OtlpTarget, Protocol};

    fn otlp(timeout: Duration) -> Destination {
        Destination::Otlp(OtlpTarget {
            endpoint: "http://127.0.0.1:4317".into(),
            protocol: Protocol::Grpc,
            headers: Vec::new(),
            timeout,
            compression: crate::config::Compression::None,
            tls: Default::default(),
        })
    }

    #[test]
    fn the_bound_is_the_longer_otlp_timeout_or_the_local_default() {
        let code = CodeSettings {
            traces_exporter: Some(Exporter::RunDir),
            metrics_exporter: Some(Exporter::RunDir),
            ..CodeSettings::default()
        };
        let mut settings = resolve(&code).unwrap();
        assert_eq!(flush_bound(&settings), LOCAL_FLUSH_BOUND);

        settings.traces = otlp(Duration::from_secs(2));
        assert_eq!(flush_bound(&settings), Duration::from_secs(2));

        settings.metrics = otlp(Duration::from_secs(7));
        assert_eq!(flush_bound(&settings), Duration::from_secs(7));
    }
}

//! Flush on SIGINT and SIGTERM: completed spans are exported before the process exits.
//!
//! A thread waits for the signal, flushes both providers (bounded by their export
//! timeouts), then lets the signal take its default course, so Ctrl-C still stops the run.
//! The thread lives as long as the process: the global subscriber it serves does too.

use opentelemetry_sdk::metrics::SdkMeterProvider;
use opentelemetry_sdk::trace::SdkTracerProvider;
use signal_hook::consts::{SIGINT, SIGTERM};
use signal_hook::iterator::Signals;

/// Starts the signal thread.
pub(crate) fn flush_on_signal(
    tracer: SdkTracerProvider,
    meter: SdkMeterProvider,
) -> std::io::Result<()> {
    let mut signals = Signals::new([SIGINT, SIGTERM])?;
    std::thread::Builder::new()
        .name("gpuspan-signals".into())
        .spawn(move || {
            if let Some(signal) = signals.forever().next() {
                let name = if signal == SIGINT {
                    "SIGINT"
                } else {
                    "SIGTERM"
                };
                eprintln!("gpuspan: {name}: exporting completed spans before exiting");
                let _ = tracer.force_flush();
                let _ = meter.force_flush();
                let _ = signal_hook::low_level::emulate_default_handler(signal);
            }
        })?;
    Ok(())
}

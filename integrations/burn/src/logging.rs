//! One global subscriber for burn's experiment log and gpuspan's spans, and the `log`
//! bridge that follows burn's loop.
//!
//! burn's default installer sets a global subscriber with its file layer alone, so a second
//! one (gpuspan's) fails with "a global subscriber is already set". Here the file layer is
//! built as burn builds it (same file, level and filter) and installed together with
//! gpuspan's layer; `launch` then tells burn not to install its own.
//!
//! burn-train logs through the `log` crate. The bridge hands each record to tracing, as
//! `tracing-log`'s `LogTracer` does, after letting the lines that mark burn's loop open and
//! close the spans ([`crate::steps`]). Those records go to the file only.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use burn::tensor::Device;
use tracing_log::LogTracer;
use tracing_subscriber::filter::{filter_fn, LevelFilter};
use tracing_subscriber::prelude::*;

use crate::steps;
use crate::Error;

/// The device whose allocator figures are pushed at each boundary (set by `launch`).
static DEVICE: Mutex<Option<Device>> = Mutex::new(None);

/// Sets the device whose allocator `launch`'s training runs on.
pub(crate) fn watch_device(device: Option<Device>) {
    if let Ok(mut slot) = DEVICE.lock() {
        *slot = device;
    }
}

/// Installs burn's file log at `log_file` and gpuspan's layer as the global subscriber,
/// and the bridge as the `log` logger.
pub(crate) fn install(log_file: &Path, telemetry: &gpuspan::Telemetry) -> Result<(), Error> {
    let directory = match log_file.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let file_name = log_file.file_name().ok_or_else(|| Error::LogFile {
        path: log_file.to_path_buf(),
    })?;
    std::fs::create_dir_all(&directory).map_err(|source| Error::LogDirectory {
        path: directory.clone(),
        source,
    })?;
    let writer = tracing_appender::rolling::never(&directory, file_name);
    // burn's own filter: info and above, without wgpu's info lines. The file takes no
    // spans, so its lines read as burn writes them, and the training thread does not
    // format every span's memory fields a second time for it.
    let file = tracing_subscriber::fmt::layer()
        .with_ansi(false)
        .with_writer(writer)
        .with_filter(LevelFilter::INFO)
        .with_filter(filter_fn(|meta| !meta.is_span() && !wgpu_chatter(meta)));
    // Info and above, as burn's file layer: a subscriber that takes trace and debug turns
    // on every such callsite in burn and its backends, which costs the training thread
    // more than the spans do. The lines of the `log` crate (burn's among them) go to the
    // file only: as span events they would repeat each boundary on the span it opened.
    let spans = telemetry
        .layer()
        .with_filter(LevelFilter::INFO)
        .with_filter(filter_fn(|meta| meta.is_span() || !from_log(meta)));
    let subscriber = tracing_subscriber::registry().with(spans).with(file);
    // The logger first: `tracing_subscriber`'s `init()` sets both, and then nothing here
    // is installed.
    log::set_boxed_logger(Box::new(Bridge(LogTracer::new())))
        .map_err(|_| Error::LoggerAlreadySet)?;
    log::set_max_level(log::LevelFilter::Info);
    tracing::subscriber::set_global_default(subscriber).map_err(|_| Error::SubscriberAlreadySet)?;
    chain_panic_hook(log_file.to_path_buf());
    Ok(())
}

/// wgpu's info lines and below, which burn's file leaves out ("wgpu is logging too much").
fn wgpu_chatter(meta: &tracing::Metadata<'_>) -> bool {
    meta.module_path()
        .is_some_and(|path| path.starts_with("wgpu"))
        && *meta.level() >= tracing::Level::INFO
}

/// Whether an event came through the `log` bridge (tracing-log gives those fields).
fn from_log(meta: &tracing::Metadata<'_>) -> bool {
    meta.fields().field("log.target").is_some()
}

/// Logs a panic into the experiment log and says where it is, as burn's installer does.
fn chain_panic_hook(log_file: PathBuf) {
    let previous = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        log::error!("PANIC => {info}");
        eprintln!(
            "=== PANIC ===\nA fatal error happened, you can check the experiment logs here => \
             '{}'\n=============",
            log_file.display()
        );
        previous(info);
    }));
}

thread_local! {
    /// The line being read, reused: the training thread allocates nothing per line.
    static MESSAGE: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
}

/// The `log` logger: burn's boundaries first, then tracing.
struct Bridge(LogTracer);

impl log::Log for Bridge {
    fn enabled(&self, metadata: &log::Metadata<'_>) -> bool {
        self.0.enabled(metadata)
    }

    fn log(&self, record: &log::Record<'_>) {
        if record.level() == log::Level::Info && record.target().starts_with("burn_train") {
            let boundary = MESSAGE.with(|message| {
                // A line logged while this one is formatted is not burn's loop.
                let mut message = message.try_borrow_mut().ok()?;
                message.clear();
                let _ = std::fmt::Write::write_fmt(&mut *message, *record.args());
                steps::boundary(record.target(), &message)
            });
            if let Some(boundary) = boundary {
                push_allocator();
                steps::cross(boundary);
            }
        }
        self.0.log(record);
    }

    fn flush(&self) {
        self.0.flush();
    }
}

/// Pushes the watched device's allocator figures (in use, reserved) to the open spans:
/// CubeCL's backends report them, the CPU backends do not.
pub(crate) fn push_allocator() {
    let usage = DEVICE
        .lock()
        .ok()
        .and_then(|device| device.as_ref().and_then(Device::memory_pool_usage));
    if let Some(usage) = usage {
        gpuspan::record_allocator(usage.bytes_in_use, usage.bytes_reserved);
    }
}

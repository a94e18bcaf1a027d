//! Errors of setting up and of shutting down.

use std::path::PathBuf;

/// Why [`init`](crate::init) or [`Builder::install`](crate::Builder::install) failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum InitError {
    /// A setting (environment variable or builder value) does not parse.
    #[error("{name}={value:?} is not valid: expected {expected}")]
    InvalidSetting {
        /// The environment variable, or the builder setting.
        name: String,
        /// The value given.
        value: String,
        /// What would be accepted.
        expected: String,
    },
    /// A TLS file (a CA, a client certificate or key) is missing or holds no certificate
    /// or key.
    #[error("{name}={path:?}: {problem}")]
    TlsFile {
        /// The environment variable, or the builder setting, that named the file.
        name: String,
        /// The file.
        path: PathBuf,
        /// What is wrong with it, and the fix.
        problem: String,
    },
    /// A global tracing subscriber is already set (gpuspan's or another).
    #[error(
        "a global tracing subscriber is already installed; call gpuspan::init() once per \
         process, or add Telemetry::layer() to your own subscriber instead"
    )]
    AlreadyInstalled,
    /// The run directory could not be created.
    #[error("cannot create the run directory {path}: {source} (set GPUSPAN_RUN_DIR to a writable directory)")]
    RunDir {
        /// The directory.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// An exporter could not be built.
    #[error("cannot set up the {signal} exporter for {endpoint}: {reason}")]
    Exporter {
        /// `traces` or `metrics`.
        signal: &'static str,
        /// Where it would have sent data.
        endpoint: String,
        /// What went wrong.
        reason: String,
    },
    /// The protocol was asked for but this build leaves it out.
    #[error("OTLP over {protocol} is not in this build: enable gpuspan's `{feature}` feature")]
    ProtocolNotBuilt {
        /// `grpc` or `http/protobuf`.
        protocol: &'static str,
        /// The cargo feature that adds it.
        feature: &'static str,
    },
    /// The Prometheus endpoint could not be served.
    #[error("cannot serve Prometheus metrics on {addr}: {reason}")]
    Prometheus {
        /// The address asked for.
        addr: std::net::SocketAddr,
        /// What went wrong.
        reason: String,
    },
    /// A background thread could not be started.
    #[error("cannot start gpuspan's {what} thread: {source}")]
    Thread {
        /// Which thread.
        what: &'static str,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}

/// What went wrong while flushing and shutting down. Everything that could be exported was.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ShutdownError {
    /// Some spans or metric points never reached their destination.
    #[error(
        "{spans} span(s) and {points} metric point(s) were not exported to {destination}: {reason}"
    )]
    Dropped {
        /// Spans lost (queue full or export failed).
        spans: u64,
        /// Metric data points lost.
        points: u64,
        /// Where they were going.
        destination: String,
        /// The last export error, or why the queue overflowed.
        reason: String,
    },
    /// The OpenTelemetry SDK reported an error while flushing or shutting down (a timeout,
    /// an exporter's failure); the SDK's own error is kept as the source.
    #[error("{0}")]
    Sdk(#[source] opentelemetry_sdk::error::OTelSdkError),
}

//! `gpuspan collect` and `gpuspan run`: GPU memory on the spans of programs that are not
//! built with gpuspan.
//!
//! A [`Collector`] samples every device (and every process's GPU memory) into a range-max
//! timeline, receives OTLP over gRPC and HTTP, puts `gpu.memory.*` and
//! `gpu.process.memory.*` on each span by its own start and end time, and forwards spans
//! and metrics to where the standard `OTEL_EXPORTER_OTLP_*` variables point, or to the run
//! directory. [`run`] starts one on free local ports around a command.
//!
//! Requests wait for the forward target in a queue bounded in bytes of decoded requests
//! ([`DEFAULT_MAX_QUEUE_BYTES`], [`CollectorBuilder::max_queue_bytes`]). A decoded request
//! is several times its protobuf size, so each is measured as decoded (every vector's and
//! string's capacity), with the memory figures its spans will get. Before a request is
//! decoded, what decoding it will allocate is read from its body and taken from the bound:
//! a request that does not fit now is refused with HTTP 503 and `Retry-After`, or gRPC
//! `UNAVAILABLE`, which OTLP exporters retry (counted in
//! [`CollectStats::requests_refused`]); one larger than the whole bound is refused with
//! HTTP 413 or gRPC `RESOURCE_EXHAUSTED` (counted in [`CollectStats::requests_rejected`]).
//! A few requests are read and decoded at once ([`DEFAULT_MAX_CONCURRENT_REQUESTS`],
//! [`CollectorBuilder::max_concurrent_requests`]). [`queued_bytes`] gives a request's share
//! as decoded.
//!
//! Forwarding goes through the same export queue as the SDK's spans (retry with
//! exponential backoff, exact accounting): the byte bound is the admission rule in front of
//! it, and [`CollectStats`] is read from its counts.
//!
//! A [`Collector`] runs on its own runtime. It can be started, shut down and dropped from
//! async code: what blocks then runs on a thread of its own.

#[cfg(feature = "__bench")]
mod bench;
mod bootstrap;
mod bound;
mod budget;
mod builder;
mod collector;
mod decode;
mod enrich;
mod forward;
mod job;
mod pipeline;
mod run;
mod server;
mod size;
mod store;
#[cfg(test)]
mod testing;
mod timeline;
mod tls;
mod tree;

use std::net::SocketAddr;

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;

pub use builder::CollectorBuilder;
pub use collector::Collector;
pub use run::{run, RunOutcome};

/// The collector's timeline and enrichment without the servers, for the benchmarks; not
/// part of the API (feature `__bench`).
#[cfg(feature = "__bench")]
#[doc(hidden)]
pub use bench::Timeline as __BenchTimeline;

/// The default gRPC address: the OTLP port, on loopback.
pub const DEFAULT_GRPC_ADDR: &str = "127.0.0.1:4317";
/// The default HTTP address.
pub const DEFAULT_HTTP_ADDR: &str = "127.0.0.1:4318";
/// The default largest request body, compressed or decompressed.
pub const DEFAULT_MAX_REQUEST_BYTES: usize = 16 << 20;
/// The default number of requests read, decompressed and decoded at once; more wait their
/// turn.
pub const DEFAULT_MAX_CONCURRENT_REQUESTS: usize = 2;
/// The default number of connections served at once (on both addresses together); more
/// wait to be accepted.
pub const DEFAULT_MAX_CONNECTIONS: usize = 128;
/// The most a connection holds before a request of it is read: over HTTP/1.1 the request's
/// head (at most 64 KiB); over HTTP/2 its streams' headers (4 streams of at most 16 KiB)
/// and the start of their bodies (a 64 KiB window), with the connection's own buffers and
/// tasks (about 240 KiB measured, at most).
pub const CONNECTION_BYTES: usize = 512 << 10;
/// The default bound of the forward queue, in bytes of decoded requests (256 MiB): what is
/// being decoded, waits for the forward target and is being sent, the spans' memory
/// figures included. A 16 MiB request of small spans is 100 to 140 MiB once decoded; an
/// SDK's batch of 512 spans is well under 4 MiB with its figures.
pub const DEFAULT_MAX_QUEUE_BYTES: usize = 256 << 20;

/// Why the collector could not start or stop cleanly.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CollectError {
    /// The telemetry setup failed (a setting, the run directory, an exporter).
    #[error(transparent)]
    Init(#[from] gpuspan::InitError),
    /// A listening address could not be bound.
    #[error(
        "cannot listen on {addr}: {source} (choose another address or port, or stop what uses it)"
    )]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The receivers' certificate or key cannot be served.
    #[error("{flag} {path:?}: {problem}; give the server's certificate chain and its key in PEM")]
    Tls {
        /// `--tls-cert` or `--tls-key`.
        flag: &'static str,
        /// The file.
        path: std::path::PathBuf,
        /// What is wrong.
        problem: String,
    },
    /// A forward target could not be set up.
    #[error("cannot forward {signal}: {reason}")]
    Forward {
        /// `traces` or `metrics`.
        signal: &'static str,
        /// What was wrong.
        reason: String,
    },
    /// `gpuspan run` was given no command.
    #[error("no command given: use gpuspan run -- <command> [args]")]
    NoCommand,
    /// The command could not be started.
    #[error("cannot start {program}: {source} (is it installed and on PATH?)")]
    Command {
        /// The program.
        program: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The Python bootstrap could not be written to the temporary directory.
    #[error(
        "cannot write the Python bootstrap to the temporary directory ({0}); set TMPDIR to a \
         writable directory"
    )]
    Bootstrap(#[source] std::io::Error),
    /// A thread or runtime could not be started.
    #[error("cannot start the collector's runtime: {0}")]
    Runtime(#[source] std::io::Error),
}

/// Counts of what a collector received, enriched, forwarded and turned away.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct CollectStats {
    /// Spans received.
    pub spans_received: u64,
    /// Spans given memory figures.
    pub spans_enriched: u64,
    /// Spans that already carried `gpu.memory.*` and passed unchanged.
    pub spans_passed: u64,
    /// Spans delivered to the forward target.
    pub spans_forwarded: u64,
    /// Spans dropped: the target kept failing, or the collector stopped before they could
    /// be sent. Once stopped, `spans_received == spans_forwarded + spans_dropped`.
    pub spans_dropped: u64,
    /// Metric export requests received.
    pub metric_requests_received: u64,
    /// Metric export requests delivered.
    pub metric_requests_forwarded: u64,
    /// Metric export requests dropped.
    pub metric_requests_dropped: u64,
    /// Requests answered with an error (malformed, too large, wrong content type).
    pub requests_rejected: u64,
    /// Requests refused because the forward queue was full, or every decoding slot stayed
    /// busy (HTTP 503 with `Retry-After`, gRPC `UNAVAILABLE`). Their senders keep and resend them, so their spans are not
    /// counted as received.
    pub requests_refused: u64,
}

/// The bytes the receiver expects decoding `body` to allocate at most (OTLP/JSON or
/// protobuf, a trace or a metrics export request), found before decoding it; `None` when it
/// is not one. Not part of the API (feature `__bench`): for the test that holds it against
/// what decoding allocates.
#[cfg(feature = "__bench")]
#[doc(hidden)]
pub fn __decoded_bound(json: bool, traces: bool, body: &[u8]) -> Option<usize> {
    let format = if json {
        decode::Format::Json
    } else {
        decode::Format::Protobuf
    };
    let foreseen = if traces {
        bound::traces(format, body, usize::MAX)
    } else {
        bound::metrics(format, body, usize::MAX)
    };
    match foreseen.ok()? {
        bound::Foreseen::AtMost(bytes) => Some(bytes),
        bound::Foreseen::Over(_) => None,
    }
}

/// Bytes a decoded trace request holds, as the forward queue counts it against
/// [`CollectorBuilder::max_queue_bytes`]: for sizing the bound to the requests a program
/// sends.
pub fn queued_bytes(request: &ExportTraceServiceRequest) -> usize {
    size::traces(request)
}

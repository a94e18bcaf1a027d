//! The collector's settings: where to listen, how much to hold, where to forward.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use super::{
    CollectError, Collector, DEFAULT_GRPC_ADDR, DEFAULT_HTTP_ADDR, DEFAULT_MAX_CONCURRENT_REQUESTS,
    DEFAULT_MAX_CONNECTIONS, DEFAULT_MAX_QUEUE_BYTES, DEFAULT_MAX_REQUEST_BYTES,
};
use gpuspan::pipeline::CodeSettings;

/// Sets up a [`Collector`].
#[derive(Debug, Clone)]
#[must_use = "a builder does nothing until `start()`"]
pub struct CollectorBuilder {
    pub(super) grpc: Option<SocketAddr>,
    pub(super) http: Option<SocketAddr>,
    pub(super) max_request_bytes: usize,
    pub(super) max_queue_bytes: usize,
    pub(super) max_concurrent_requests: usize,
    pub(super) max_connections: usize,
    pub(super) service_name: String,
    pub(super) code: CodeSettings,
    /// The receivers' certificate chain and key (PEM files), to serve TLS.
    pub(super) tls: Option<(PathBuf, PathBuf)>,
}

impl Default for CollectorBuilder {
    fn default() -> Self {
        Self {
            grpc: DEFAULT_GRPC_ADDR.parse().ok(),
            http: DEFAULT_HTTP_ADDR.parse().ok(),
            max_request_bytes: DEFAULT_MAX_REQUEST_BYTES,
            max_queue_bytes: DEFAULT_MAX_QUEUE_BYTES,
            max_concurrent_requests: DEFAULT_MAX_CONCURRENT_REQUESTS,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            service_name: "gpuspan-collect".into(),
            code: CodeSettings::default(),
            tls: None,
        }
    }
}

impl CollectorBuilder {
    /// Where to receive OTLP/gRPC (`None`: not at all). Port 0 picks a free port.
    pub fn grpc_addr(mut self, addr: Option<SocketAddr>) -> Self {
        self.grpc = addr;
        self
    }

    /// Where to receive OTLP/HTTP (`None`: not at all). Both ports answer both protocols.
    pub fn http_addr(mut self, addr: Option<SocketAddr>) -> Self {
        self.http = addr;
        self
    }

    /// The largest request accepted, compressed and once decompressed.
    pub fn max_request_bytes(mut self, bytes: usize) -> Self {
        self.max_request_bytes = bytes.max(1024);
        self
    }

    /// The bound of the forward queue, in bytes of decoded requests (default
    /// [`DEFAULT_MAX_QUEUE_BYTES`]): what requests being decoded, waiting and being sent
    /// hold, their spans' memory figures included. A request that would hold more than the
    /// whole bound is refused as too large (HTTP 413, gRPC `RESOURCE_EXHAUSTED`).
    pub fn max_queue_bytes(mut self, bytes: usize) -> Self {
        self.max_queue_bytes = bytes.max(1);
        self
    }

    /// Requests read, decompressed and decoded at once (default
    /// [`DEFAULT_MAX_CONCURRENT_REQUESTS`], at least 1); more wait their turn. Each holds
    /// its body and its decompressed body, up to [`max_request_bytes`](Self::max_request_bytes)
    /// each, besides the queue's bound.
    pub fn max_concurrent_requests(mut self, requests: usize) -> Self {
        self.max_concurrent_requests = requests.max(1);
        self
    }

    /// Connections served at once, on both addresses together (default
    /// [`DEFAULT_MAX_CONNECTIONS`], at least 1); more wait to be accepted. Each holds at most
    /// [`CONNECTION_BYTES`](super::CONNECTION_BYTES) before a request of it is read.
    pub fn max_connections(mut self, connections: usize) -> Self {
        self.max_connections = connections.max(1);
        self
    }

    /// Serves both receivers over TLS with this certificate chain and key (PEM files);
    /// `None`: plain text.
    pub fn tls(mut self, cert_and_key: Option<(PathBuf, PathBuf)>) -> Self {
        self.tls = cert_and_key;
        self
    }

    /// The CA a forward target's `https://` certificate is checked against (else
    /// `OTEL_EXPORTER_OTLP_CERTIFICATE`, else the system's roots).
    pub fn certificate(mut self, path: impl Into<PathBuf>) -> Self {
        self.code.certificate = Some(path.into());
        self
    }

    /// `service.name` of the collector's own gauges.
    pub fn service_name(mut self, name: impl Into<String>) -> Self {
        self.service_name = name.into();
        self
    }

    /// Where to forward (else `OTEL_EXPORTER_OTLP_ENDPOINT`, else the run directory).
    pub fn endpoint(mut self, url: impl Into<String>) -> Self {
        self.code.endpoint = Some(url.into());
        self
    }

    /// How to forward (else `OTEL_EXPORTER_OTLP_PROTOCOL`, else gRPC).
    pub fn protocol(mut self, protocol: gpuspan::Protocol) -> Self {
        self.code.protocol = Some(protocol);
        self
    }

    /// The directory of runs (else `GPUSPAN_RUN_DIR`, else `gpuspan-runs`).
    pub fn run_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.code.run_dir = Some(dir.into());
        self
    }

    /// The NVML library (else `GPUSPAN_NVML_LIB`, else the system's).
    pub fn nvml_lib(mut self, path: impl Into<PathBuf>) -> Self {
        self.code.nvml_lib = Some(path.into());
        self
    }

    /// The sampling interval (else `GPUSPAN_SAMPLE_INTERVAL`, else
    /// [`DEFAULT_SAMPLE_INTERVAL`](gpuspan::settings::DEFAULT_SAMPLE_INTERVAL)).
    pub fn sample_interval(mut self, interval: Duration) -> Self {
        self.code.sample_interval = Some(interval);
        self
    }

    /// Starts sampling, listening and forwarding. Works from async code too.
    ///
    /// # Errors
    /// A setting that does not parse, an address in use, a forward target that cannot be
    /// set up; see [`CollectError`].
    pub fn start(self) -> Result<Collector, CollectError> {
        Collector::start(self)
    }
}

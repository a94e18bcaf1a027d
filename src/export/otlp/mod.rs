//! OTLP exporters for one signal, built inside the export runtime (tonic's channel spawns
//! its worker on the runtime it is built in).

use std::sync::Arc;

#[cfg(any(feature = "otlp-grpc", feature = "otlp-http"))]
use opentelemetry_sdk::metrics::Temporality;

use super::health::ExportHealth;
#[cfg(any(feature = "otlp-grpc", feature = "otlp-http"))]
use super::metrics::CountingMetricExporter;
#[allow(unused_imports)]
use crate::config::{Compression, OtlpTarget, Protocol};

#[cfg(feature = "otlp-grpc")]
mod grpc;
#[cfg(feature = "otlp-http")]
pub(crate) mod http;
#[cfg(feature = "pipeline")]
pub(crate) mod request;
#[cfg(any(feature = "otlp-grpc", feature = "otlp-http"))]
pub(crate) mod tls;
pub(crate) use super::transport_note::TransportNote;
use crate::error::InitError;

/// A resolved header that cannot go on the wire.
#[cfg(any(feature = "otlp-grpc", feature = "otlp-http"))]
#[derive(Debug, thiserror::Error)]
pub enum HeaderError {
    /// The header's name.
    #[error("'{0}' is not a valid header name")]
    Name(String),
    /// The value of the header named.
    #[error("the value of header '{0}' is not valid (printable ASCII only)")]
    Value(String),
}

/// The private runtime that drives OTLP exports: one worker thread, `gpuspan-export`.
pub(crate) fn runtime() -> Result<tokio::runtime::Runtime, InitError> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("gpuspan-export")
        // The transport's own tracing spans are not the program's: no subscriber here.
        .on_thread_start(|| {
            crate::background::silence_tracing();
            crate::background::background_priority();
        })
        .enable_all()
        .build()
        .map_err(|source| InitError::Thread {
            what: "export",
            source,
        })
}

#[cfg(any(feature = "otlp-grpc", feature = "otlp-http"))]
fn build_error(signal: &'static str, target: &OtlpTarget, error: impl ToString) -> InitError {
    InitError::Exporter {
        signal,
        endpoint: target.endpoint.clone(),
        reason: error.to_string(),
    }
}

/// Applies `target` to an OTLP exporter builder of either signal: what was resolved is
/// what goes on the wire. opentelemetry-otlp would merge `OTEL_EXPORTER_OTLP_*HEADERS`
/// over the headers it is given, so the resolved headers are set again on every request
/// (an interceptor for gRPC, a client wrapper for HTTP), after anything it added. It also
/// reads `OTEL_EXPORTER_OTLP_*PROTOCOL` for any protocol it is not given, so the protocol
/// is always given.
///
/// Its retry is turned off: by default it retries a refused or failed request three times
/// itself (100 ms doubling to 1.6 s, with up to 100 ms of jitter, within the export
/// timeout), over gRPC and HTTP, for spans and metrics alike. gpuspan's export queue and
/// its metric exporter retry already, so each attempt they make is one request; with both
/// layers one failure became four requests, and shutdown's one last attempt four too.
#[cfg(any(feature = "otlp-grpc", feature = "otlp-http"))]
macro_rules! configure {
    ($builder:expr, $target:expr, $note:expr, $signal:literal) => {{
        let target: &OtlpTarget = $target;
        #[cfg_attr(not(feature = "otlp-http"), allow(unused_variables))]
        let note: &Arc<TransportNote> = $note;
        match target.protocol {
            #[cfg(feature = "otlp-grpc")]
            Protocol::Grpc => {
                use opentelemetry_otlp::{WithExportConfig, WithTonicConfig};
                let headers =
                    grpc::metadata(target).map_err(|e| build_error($signal, target, e))?;
                let builder = $builder
                    .with_tonic()
                    .with_protocol(opentelemetry_otlp::Protocol::Grpc)
                    .with_endpoint(target.endpoint.clone())
                    .with_timeout(target.timeout)
                    .with_retry_policy(opentelemetry_otlp::RetryPolicy::disabled())
                    .with_interceptor(grpc::OverrideHeaders(headers));
                let builder = match tls::grpc(target) {
                    Some(tls) => builder.with_tls_config(tls),
                    None => builder,
                };
                let builder = match target.compression {
                    Compression::Gzip => {
                        builder.with_compression(opentelemetry_otlp::Compression::Gzip)
                    }
                    _ => builder,
                };
                builder.build()
            }
            #[cfg(feature = "otlp-http")]
            Protocol::HttpProtobuf => {
                use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
                let client = http::WireClient::new(target, Some(Arc::clone(note)))
                    .map_err(|e| build_error($signal, target, e))?;
                $builder
                    .with_http()
                    .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
                    .with_endpoint(target.endpoint.clone())
                    .with_timeout(target.timeout)
                    .with_retry_policy(opentelemetry_otlp::RetryPolicy::disabled())
                    .with_http_client(client)
                    .build()
            }
            #[allow(unreachable_patterns)]
            _ => return Err(not_built(target.protocol)),
        }
    }};
}

/// An OTLP span exporter for `target`.
#[cfg(any(feature = "otlp-grpc", feature = "otlp-http"))]
pub(crate) fn span_exporter(
    target: &OtlpTarget,
    runtime: &tokio::runtime::Handle,
    note: &Arc<TransportNote>,
) -> Result<opentelemetry_otlp::SpanExporter, InitError> {
    let _context = runtime.enter();
    let exporter = configure!(
        opentelemetry_otlp::SpanExporter::builder(),
        target,
        note,
        "traces"
    );
    exporter.map_err(|e| build_error("traces", target, e))
}

/// An OTLP metric exporter for `target`, retrying and counting what it sends.
#[cfg(any(feature = "otlp-grpc", feature = "otlp-http"))]
pub(crate) fn metric_exporter(
    target: &OtlpTarget,
    runtime: &tokio::runtime::Handle,
    health: Arc<ExportHealth>,
    retry_for: std::time::Duration,
    stopping: Arc<std::sync::atomic::AtomicBool>,
) -> Result<CountingMetricExporter<opentelemetry_otlp::MetricExporter>, InitError> {
    let _context = runtime.enter();
    let builder =
        opentelemetry_otlp::MetricExporter::builder().with_temporality(Temporality::Cumulative);
    let note = health
        .note()
        .cloned()
        .unwrap_or_else(|| TransportNote::new(target));
    let exporter = configure!(builder, target, &note, "metrics");
    let exporter = exporter.map_err(|e| build_error("metrics", target, e))?;
    Ok(CountingMetricExporter::new(
        exporter,
        Some(runtime.clone()),
        health,
        retry_for,
        stopping,
    ))
}

#[allow(dead_code)]
fn not_built(protocol: Protocol) -> InitError {
    match protocol {
        Protocol::Grpc => InitError::ProtocolNotBuilt {
            protocol: "grpc",
            feature: "otlp-grpc",
        },
        Protocol::HttpProtobuf => InitError::ProtocolNotBuilt {
            protocol: "http/protobuf",
            feature: "otlp-http",
        },
    }
}

/// Without a transport, asking for OTLP is an error naming the feature to enable.
#[cfg(not(any(feature = "otlp-grpc", feature = "otlp-http")))]
pub(crate) fn span_exporter(
    target: &OtlpTarget,
    _runtime: &tokio::runtime::Handle,
    _note: &Arc<TransportNote>,
) -> Result<unbuilt::Unbuilt, InitError> {
    Err(not_built(target.protocol))
}

/// Without a transport, asking for OTLP is an error naming the feature to enable.
#[cfg(not(any(feature = "otlp-grpc", feature = "otlp-http")))]
pub(crate) fn metric_exporter(
    target: &OtlpTarget,
    _runtime: &tokio::runtime::Handle,
    _health: Arc<ExportHealth>,
    _retry_for: std::time::Duration,
    _stopping: Arc<std::sync::atomic::AtomicBool>,
) -> Result<unbuilt::Unbuilt, InitError> {
    Err(not_built(target.protocol))
}

/// The exporter type of a build without OTLP transports: it has no values.
#[cfg(not(any(feature = "otlp-grpc", feature = "otlp-http")))]
mod unbuilt {
    use std::time::Duration;

    use opentelemetry_sdk::error::OTelSdkResult;
    use opentelemetry_sdk::metrics::data::ResourceMetrics;
    use opentelemetry_sdk::metrics::exporter::PushMetricExporter;
    use opentelemetry_sdk::metrics::Temporality;
    use opentelemetry_sdk::trace::{SpanData, SpanExporter};

    #[derive(Debug)]
    pub(crate) enum Unbuilt {}

    impl SpanExporter for Unbuilt {
        async fn export(&self, _batch: Vec<SpanData>) -> OTelSdkResult {
            match *self {}
        }
    }

    impl PushMetricExporter for Unbuilt {
        async fn export(&self, _metrics: &ResourceMetrics) -> OTelSdkResult {
            match *self {}
        }
        fn force_flush(&self) -> OTelSdkResult {
            match *self {}
        }
        fn shutdown_with_timeout(&self, _timeout: Duration) -> OTelSdkResult {
            match *self {}
        }
        fn temporality(&self) -> Temporality {
            match *self {}
        }
    }
}

//! OTLP exporters for one signal, built inside the export runtime (tonic's channel spawns
//! its worker on the runtime it is built in).

use std::sync::Arc;

#[cfg(any(feature = "otlp-grpc", feature = "otlp-http"))]
use opentelemetry_sdk::metrics::Temporality;

use super::health::ExportHealth;
#[cfg(any(feature = "otlp-grpc", feature = "otlp-http"))]
use super::metrics::CountingMetricExporter;
use crate::config::{OtlpTarget, Protocol};
use crate::error::InitError;

/// The private runtime that drives OTLP exports: one worker thread, `gpuspan-export`.
pub(crate) fn runtime() -> Result<tokio::runtime::Runtime, InitError> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("gpuspan-export")
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

/// An OTLP span exporter for `target`.
#[cfg(any(feature = "otlp-grpc", feature = "otlp-http"))]
pub(crate) fn span_exporter(
    target: &OtlpTarget,
    runtime: &tokio::runtime::Handle,
) -> Result<opentelemetry_otlp::SpanExporter, InitError> {
    let _context = runtime.enter();
    let builder = opentelemetry_otlp::SpanExporter::builder();
    let exporter = match target.protocol {
        #[cfg(feature = "otlp-grpc")]
        Protocol::Grpc => {
            use opentelemetry_otlp::{WithExportConfig, WithTonicConfig};
            builder
                .with_tonic()
                .with_endpoint(target.endpoint.clone())
                .with_timeout(target.timeout)
                .with_metadata(metadata(target).map_err(|e| build_error("traces", target, e))?)
                .build()
        }
        #[cfg(feature = "otlp-http")]
        Protocol::HttpProtobuf => {
            use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
            builder
                .with_http()
                .with_endpoint(target.endpoint.clone())
                .with_timeout(target.timeout)
                .with_headers(target.headers.iter().cloned().collect())
                .build()
        }
        #[allow(unreachable_patterns)]
        _ => return Err(not_built(target.protocol)),
    };
    exporter.map_err(|e| build_error("traces", target, e))
}

/// An OTLP metric exporter for `target`, counting what it fails to send.
#[cfg(any(feature = "otlp-grpc", feature = "otlp-http"))]
pub(crate) fn metric_exporter(
    target: &OtlpTarget,
    runtime: &tokio::runtime::Handle,
    health: Arc<ExportHealth>,
) -> Result<CountingMetricExporter<opentelemetry_otlp::MetricExporter>, InitError> {
    let _context = runtime.enter();
    let builder = opentelemetry_otlp::MetricExporter::builder();
    let exporter = match target.protocol {
        #[cfg(feature = "otlp-grpc")]
        Protocol::Grpc => {
            use opentelemetry_otlp::{WithExportConfig, WithTonicConfig};
            builder
                .with_tonic()
                .with_endpoint(target.endpoint.clone())
                .with_timeout(target.timeout)
                .with_metadata(metadata(target).map_err(|e| build_error("metrics", target, e))?)
                .with_temporality(Temporality::Cumulative)
                .build()
        }
        #[cfg(feature = "otlp-http")]
        Protocol::HttpProtobuf => {
            use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
            builder
                .with_http()
                .with_endpoint(target.endpoint.clone())
                .with_timeout(target.timeout)
                .with_headers(target.headers.iter().cloned().collect())
                .with_temporality(Temporality::Cumulative)
                .build()
        }
        #[allow(unreachable_patterns)]
        _ => return Err(not_built(target.protocol)),
    };
    let exporter = exporter.map_err(|e| build_error("metrics", target, e))?;
    Ok(CountingMetricExporter::new(
        exporter,
        Some(runtime.clone()),
        health,
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

#[cfg(feature = "otlp-grpc")]
fn metadata(target: &OtlpTarget) -> Result<tonic::metadata::MetadataMap, String> {
    use tonic::metadata::{MetadataKey, MetadataMap, MetadataValue};
    let mut map = MetadataMap::new();
    for (key, value) in &target.headers {
        let key = MetadataKey::from_bytes(key.to_ascii_lowercase().as_bytes())
            .map_err(|_| format!("'{key}' is not a valid header name"))?;
        let value = MetadataValue::try_from(value.as_str())
            .map_err(|_| format!("the value of header '{key}' is not valid ASCII"))?;
        map.insert(key, value);
    }
    Ok(map)
}

/// Without a transport, asking for OTLP is an error naming the feature to enable.
#[cfg(not(any(feature = "otlp-grpc", feature = "otlp-http")))]
pub(crate) fn span_exporter(
    target: &OtlpTarget,
    _runtime: &tokio::runtime::Handle,
) -> Result<unbuilt::Unbuilt, InitError> {
    Err(not_built(target.protocol))
}

/// Without a transport, asking for OTLP is an error naming the feature to enable.
#[cfg(not(any(feature = "otlp-grpc", feature = "otlp-http")))]
pub(crate) fn metric_exporter(
    target: &OtlpTarget,
    _runtime: &tokio::runtime::Handle,
    _health: Arc<ExportHealth>,
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

//! OTLP exporters for one signal, built inside the export runtime (tonic's channel spawns
//! its worker on the runtime it is built in).

use std::sync::Arc;

use opentelemetry_sdk::metrics::Temporality;

use super::health::ExportHealth;
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

fn build_error(signal: &'static str, target: &OtlpTarget, error: impl ToString) -> InitError {
    InitError::Exporter {
        signal,
        endpoint: target.endpoint.clone(),
        reason: error.to_string(),
    }
}

/// An OTLP span exporter for `target`.
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

//! OTLP/JSON lines: one export request per line, as the OpenTelemetry Collector's file
//! exporter writes them. Used for the run directory and for the `console` exporter.

use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::transform::common::tonic::ResourceAttributesWithSchema;
use opentelemetry_proto::transform::trace::tonic::group_spans_by_resource_and_scope;
use opentelemetry_sdk::error::{OTelSdkError, OTelSdkResult};
use opentelemetry_sdk::metrics::data::ResourceMetrics;
use opentelemetry_sdk::metrics::exporter::PushMetricExporter;
use opentelemetry_sdk::metrics::Temporality;
use opentelemetry_sdk::trace::{SpanData, SpanExporter};
use opentelemetry_sdk::Resource;

/// A line-oriented sink: a file in the run directory, or standard output.
pub(crate) struct Lines(Mutex<Box<dyn Write + Send>>);

impl std::fmt::Debug for Lines {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Lines")
    }
}

impl Lines {
    /// Appends to `path`, creating it.
    pub(crate) fn file(path: &Path) -> io::Result<Self> {
        let file: File = OpenOptions::new().create(true).append(true).open(path)?;
        Ok(Self(Mutex::new(Box::new(BufWriter::new(file)))))
    }

    pub(crate) fn stdout() -> Self {
        Self(Mutex::new(Box::new(io::stdout())))
    }

    fn write_json(&self, value: &impl serde::Serialize) -> OTelSdkResult {
        let mut out = self
            .0
            .lock()
            .map_err(|_| OTelSdkError::InternalFailure("output lock poisoned".into()))?;
        let failed = |e: &dyn std::fmt::Display| OTelSdkError::InternalFailure(e.to_string());
        serde_json::to_writer(&mut *out, value).map_err(|e| failed(&e))?;
        out.write_all(b"\n").map_err(|e| failed(&e))?;
        out.flush().map_err(|e| failed(&e))
    }
}

/// Writes each batch of spans as one `ExportTraceServiceRequest` line.
#[derive(Debug)]
pub(crate) struct JsonlSpanExporter {
    lines: Lines,
    resource: ResourceAttributesWithSchema,
}

impl JsonlSpanExporter {
    pub(crate) fn new(lines: Lines, resource: &Resource) -> Self {
        Self {
            lines,
            resource: resource.into(),
        }
    }
}

impl SpanExporter for JsonlSpanExporter {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let request = ExportTraceServiceRequest {
            resource_spans: group_spans_by_resource_and_scope(batch, &self.resource),
        };
        self.lines.write_json(&request)
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.resource = resource.into();
    }
}

/// Writes each collection as one `ExportMetricsServiceRequest` line.
#[derive(Debug)]
pub(crate) struct JsonlMetricExporter {
    lines: Lines,
}

impl JsonlMetricExporter {
    pub(crate) fn new(lines: Lines) -> Self {
        Self { lines }
    }
}

impl PushMetricExporter for JsonlMetricExporter {
    async fn export(&self, metrics: &ResourceMetrics) -> OTelSdkResult {
        let request = ExportMetricsServiceRequest::from(metrics);
        self.lines.write_json(&request)
    }

    fn force_flush(&self) -> OTelSdkResult {
        Ok(())
    }

    fn shutdown_with_timeout(&self, _timeout: Duration) -> OTelSdkResult {
        Ok(())
    }

    fn temporality(&self) -> Temporality {
        Temporality::Cumulative
    }
}

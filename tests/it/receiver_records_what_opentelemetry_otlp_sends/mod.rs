//! Checks the test receiver against opentelemetry-otlp itself, used directly:
//! whatever the receiver reports is what a real OTLP exporter sent.
//!
//! These tests also pin down what the exporters need from tokio when driven
//! by the SDK's thread-based `BatchSpanProcessor` and `PeriodicReader` (which
//! export from their own plain threads with `futures_executor::block_on`):
//!
//! * gRPC (tonic): the exporter must be *built* with a tokio runtime entered,
//!   because building spawns tonic's channel worker with `tokio::spawn`.
//!   Exports may then be polled from any thread, runtime or not, but only
//!   complete while that runtime keeps running on threads of its own (a
//!   multi-thread runtime), since it drives tonic's worker and connections.
//! * HTTP: building needs no runtime. With the async reqwest client (the
//!   `reqwest-client` feature, which opentelemetry-otlp prefers over
//!   `reqwest-blocking-client` when both are on), every export must be polled
//!   with a running runtime entered: on a thread without one it panics. With
//!   the blocking client, exports work on any thread that is not itself
//!   inside a runtime.
//!
//! [`InRuntime`] below is the one wrapper that satisfies all of these: each
//! poll of an export future runs with a dedicated multi-thread runtime
//! entered, whatever thread the SDK polls it from.

mod metric_points_arrive_through_a_periodic_reader;
mod spans_arrive_from_the_grpc_and_http_exporters;
mod the_receiver_listens_where_it_says_and_decodes_only_otlp;

use gpuspan_test_support as support;

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::task::Poll;
use std::time::Duration;

use opentelemetry::metrics::MeterProvider as _;
use opentelemetry::trace::{Span as _, TraceContextExt as _, Tracer as _, TracerProvider as _};
use opentelemetry::{Context, KeyValue};
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig, WithTonicConfig};
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::metrics::data::ResourceMetrics;
use opentelemetry_sdk::metrics::exporter::PushMetricExporter;
use opentelemetry_sdk::metrics::{PeriodicReader, SdkMeterProvider, Temporality};
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, SdkTracerProvider, SpanData, SpanExporter,
};
use opentelemetry_sdk::Resource;

use support::receiver::{
    unused_endpoint, AttrValue, MetricKind, ReceivedSpan, Receiver, RequestHeaders, Signal,
    SpanKind, StatusCode,
};

const SERVICE: &str = "receiver-self-test";
const API_KEY: &str = "x-api-key";
const API_KEY_VALUE: &str = "s3cr3t";

/// A runtime standing in for the one a library keeps for its exporters:
/// multi-threaded, so it makes progress on its own worker thread whatever the
/// thread that waits on an export is doing.
fn exporter_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("build the exporter runtime")
}

/// An exporter whose exports are always polled with `runtime` entered, so
/// that the SDK's processor and reader threads can drive it.
#[derive(Debug)]
struct InRuntime<E> {
    exporter: E,
    runtime: tokio::runtime::Handle,
}

impl<E> InRuntime<E> {
    fn new(exporter: E, runtime: &tokio::runtime::Runtime) -> Self {
        InRuntime {
            exporter,
            runtime: runtime.handle().clone(),
        }
    }

    fn entered<F: Future>(&self, future: F) -> Entered<F> {
        Entered {
            runtime: self.runtime.clone(),
            future: Box::pin(future),
        }
    }
}

/// A future polled with a runtime entered. The guard lives only inside
/// `poll`, so the future stays `Send`.
struct Entered<F> {
    runtime: tokio::runtime::Handle,
    future: Pin<Box<F>>,
}

impl<F: Future> Future for Entered<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> Poll<F::Output> {
        let this = self.get_mut();
        let _entered = this.runtime.enter();
        this.future.as_mut().poll(cx)
    }
}

impl<E: SpanExporter> SpanExporter for InRuntime<E> {
    fn export(&self, batch: Vec<SpanData>) -> impl Future<Output = OTelSdkResult> + Send {
        self.entered(self.exporter.export(batch))
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.exporter.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.exporter.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.exporter.set_resource(resource);
    }
}

impl<E: PushMetricExporter> PushMetricExporter for InRuntime<E> {
    fn export(&self, metrics: &ResourceMetrics) -> impl Future<Output = OTelSdkResult> + Send {
        self.entered(self.exporter.export(metrics))
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.exporter.force_flush()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.exporter.shutdown_with_timeout(timeout)
    }

    fn temporality(&self) -> Temporality {
        self.exporter.temporality()
    }
}

fn resource() -> Resource {
    Resource::builder().with_service_name(SERVICE).build()
}

fn api_key_metadata() -> tonic::metadata::MetadataMap {
    let mut metadata = tonic::metadata::MetadataMap::new();
    metadata.insert(
        API_KEY,
        API_KEY_VALUE.parse().expect("ascii metadata value"),
    );
    metadata
}

fn api_key_headers() -> HashMap<String, String> {
    HashMap::from([(API_KEY.to_owned(), API_KEY_VALUE.to_owned())])
}

fn grpc_span_exporter(receiver: &Receiver) -> opentelemetry_otlp::SpanExporter {
    opentelemetry_otlp::SpanExporter::builder()
        .with_tonic()
        .with_endpoint(receiver.endpoint())
        .with_metadata(api_key_metadata())
        .build()
        .expect("build the gRPC span exporter")
}

fn http_span_exporter(receiver: &Receiver) -> opentelemetry_otlp::SpanExporter {
    opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .with_endpoint(receiver.traces_url())
        .with_headers(api_key_headers())
        .build()
        .expect("build the HTTP span exporter")
}

fn assert_api_key_on_every_request(headers: &[RequestHeaders]) {
    assert!(!headers.is_empty(), "no request recorded");
    for request in headers {
        assert_eq!(request.get(API_KEY), Some(API_KEY_VALUE), "{request:?}");
        assert_eq!(
            request.get("X-Api-Key"),
            Some(API_KEY_VALUE),
            "lookup ignores case"
        );
    }
}

fn only<T: std::fmt::Debug>(mut items: Vec<T>) -> T {
    assert_eq!(items.len(), 1, "expected exactly one: {items:?}");
    items.pop().expect("one item")
}

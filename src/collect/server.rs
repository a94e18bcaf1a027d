//! The OTLP receiver: one router that answers OTLP/HTTP (`/v1/traces`, `/v1/metrics`) and
//! OTLP/gRPC on every port it listens on. Handlers decode, count and queue; they never
//! wait on the forward target. When the forward queue has no room for a request, it is
//! refused with what OTLP exporters retry (HTTP 503 with `Retry-After`, gRPC
//! `UNAVAILABLE`), so its sender keeps it instead of losing it.

use std::borrow::Cow;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use opentelemetry_proto::tonic::collector::metrics::v1::metrics_service_server::{
    MetricsService, MetricsServiceServer,
};
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use tonic::codec::CompressionEncoding;

use super::budget::{give_back_memory, Budget};
use super::decode::{self, Format, Rejection};
use super::pipeline::{Counters, Forwarding};
use super::size;

/// Seconds a refused sender is asked to wait before it sends again.
pub(crate) const RETRY_AFTER_SECS: u32 = 2;

/// Where received requests go.
#[derive(Clone)]
pub(crate) struct Intake {
    pub(crate) forwarding: Arc<Forwarding>,
    /// The queue's room in decoded bytes.
    pub(crate) budget: Budget,
    /// Largest request body, compressed or not.
    pub(crate) limit: usize,
}

/// A request the forward queue has no room for; its sender is told to retry.
struct Full;

impl Intake {
    /// Queues `request`, or refuses it (counted) when the queue has no room for it. A
    /// refused request is not received: its sender keeps and resends it.
    fn traces(&self, request: ExportTraceServiceRequest) -> Result<(), Full> {
        let bytes = size::traces(&request);
        let Ok(room) = self.room_for(bytes) else {
            drop(request);
            give_back_memory(bytes);
            return Err(Full);
        };
        self.forwarding.traces(request, room);
        Ok(())
    }

    /// As [`Self::traces`].
    fn metrics(&self, request: ExportMetricsServiceRequest) -> Result<(), Full> {
        let bytes = size::metrics(&request);
        let Ok(room) = self.room_for(bytes) else {
            drop(request);
            give_back_memory(bytes);
            return Err(Full);
        };
        self.forwarding.metrics(request, room);
        Ok(())
    }

    fn room_for(&self, bytes: usize) -> Result<tokio::sync::OwnedSemaphorePermit, Full> {
        self.budget.take(bytes).ok_or_else(|| self.full())
    }

    fn full(&self) -> Full {
        self.forwarding
            .counters
            .requests_refused
            .fetch_add(1, Ordering::Relaxed);
        Full
    }

    fn full_message(&self) -> String {
        format!(
            "the collector's forward queue is full ({} bytes of decoded requests wait to be \
             forwarded); retry later",
            self.budget.total()
        )
    }

    /// HTTP 503 with `Retry-After` and a `google.rpc.Status` of `UNAVAILABLE`: the OTLP/HTTP
    /// specification's "retry later" (429, 502, 503 and 504 are retryable).
    fn refuse(&self, format: Format) -> Response {
        let body = decode::error_body(format, &Rejection::new(503, self.full_message()));
        (
            StatusCode::SERVICE_UNAVAILABLE,
            [
                (header::CONTENT_TYPE, format.content_type().to_owned()),
                (header::RETRY_AFTER, RETRY_AFTER_SECS.to_string()),
            ],
            body,
        )
            .into_response()
    }

    /// gRPC `UNAVAILABLE`, which OTLP/gRPC exporters retry with backoff.
    fn refuse_grpc(&self) -> tonic::Status {
        tonic::Status::unavailable(self.full_message())
    }

    /// Refuses a protobuf body before decoding it when the queue has less room than the
    /// body's own size (a decoded request is larger than its protobuf), so a full queue
    /// costs no decoding.
    fn clearly_full(&self, format: Format, raw: &[u8]) -> Result<(), Full> {
        let floor = raw.len().min(self.budget.total());
        if format == Format::Protobuf && self.budget.free() < floor {
            return Err(self.full());
        }
        Ok(())
    }

    fn reject(&self, format: Format, rejection: &Rejection) -> Response {
        self.forwarding
            .counters
            .requests_rejected
            .fetch_add(1, Ordering::Relaxed);
        let status = StatusCode::from_u16(rejection.status).unwrap_or(StatusCode::BAD_REQUEST);
        let body = decode::error_body(format, rejection);
        (
            status,
            [(header::CONTENT_TYPE, format.content_type())],
            body,
        )
            .into_response()
    }

    /// Content type, size and encoding checks, then the decompressed body (the received
    /// bytes themselves when there was no encoding: a 16 MiB body is not held twice).
    async fn body(&self, headers: &HeaderMap, body: Body) -> Result<(Format, Bytes), Response> {
        let text = |name| {
            headers
                .get(name)
                .and_then(|v: &HeaderValue| v.to_str().ok())
        };
        let format = Format::from_content_type(text(header::CONTENT_TYPE))
            .map_err(|r| self.reject(Format::Protobuf, &r))?;
        let limit = self.limit;
        let bytes = axum::body::to_bytes(body, limit).await.map_err(|_| {
            let r = Rejection::new(
                413,
                format!(
                    "request body is over {limit} bytes (or was cut short); send smaller batches"
                ),
            );
            self.reject(format, &r)
        })?;
        let raw = match decode::decompress(text(header::CONTENT_ENCODING), &bytes, limit) {
            Ok(Cow::Borrowed(_)) => bytes.clone(),
            Ok(Cow::Owned(decompressed)) => Bytes::from(decompressed),
            Err(r) => return Err(self.reject(format, &r)),
        };
        Ok((format, raw))
    }
}

fn ok(format: Format, body: Vec<u8>) -> Response {
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, format.content_type())],
        body,
    )
        .into_response()
}

async fn http_traces(State(intake): State<Intake>, headers: HeaderMap, body: Body) -> Response {
    let (format, raw) = match intake.body(&headers, body).await {
        Ok(decoded) => decoded,
        Err(response) => return response,
    };
    if intake.clearly_full(format, &raw).is_err() {
        return intake.refuse(format);
    }
    match decode::traces(format, &raw) {
        Ok(request) => {
            if intake.traces(request).is_err() {
                return intake.refuse(format);
            }
            let reply = ExportTraceServiceResponse {
                partial_success: None,
            };
            ok(format, encode(format, &reply))
        }
        Err(r) => intake.reject(format, &r),
    }
}

async fn http_metrics(State(intake): State<Intake>, headers: HeaderMap, body: Body) -> Response {
    let (format, raw) = match intake.body(&headers, body).await {
        Ok(decoded) => decoded,
        Err(response) => return response,
    };
    if intake.clearly_full(format, &raw).is_err() {
        return intake.refuse(format);
    }
    match decode::metrics(format, &raw) {
        Ok(request) => {
            if intake.metrics(request).is_err() {
                return intake.refuse(format);
            }
            let reply = ExportMetricsServiceResponse {
                partial_success: None,
            };
            ok(format, encode(format, &reply))
        }
        Err(r) => intake.reject(format, &r),
    }
}

fn encode<T: prost::Message + serde::Serialize>(format: Format, message: &T) -> Vec<u8> {
    match format {
        Format::Protobuf => message.encode_to_vec(),
        Format::Json => serde_json::to_vec(message).unwrap_or_else(|_| b"{}".to_vec()),
    }
}

struct GrpcTraces(Intake);
struct GrpcMetrics(Intake);

#[tonic::async_trait]
impl TraceService for GrpcTraces {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        if self.0.traces(request.into_inner()).is_err() {
            return Err(self.0.refuse_grpc());
        }
        Ok(tonic::Response::new(ExportTraceServiceResponse {
            partial_success: None,
        }))
    }
}

#[tonic::async_trait]
impl MetricsService for GrpcMetrics {
    async fn export(
        &self,
        request: tonic::Request<ExportMetricsServiceRequest>,
    ) -> Result<tonic::Response<ExportMetricsServiceResponse>, tonic::Status> {
        if self.0.metrics(request.into_inner()).is_err() {
            return Err(self.0.refuse_grpc());
        }
        Ok(tonic::Response::new(ExportMetricsServiceResponse {
            partial_success: None,
        }))
    }
}

/// Counts gRPC requests that tonic turned away before a handler saw them (malformed or
/// too large messages): their replies carry a non-zero `grpc-status` header. `UNAVAILABLE`
/// (14) is the handlers' own refusal for a full queue, counted where it is decided.
async fn count_grpc_rejections(
    State(counters): State<Arc<Counters>>,
    response: Response,
) -> Response {
    let failed = response
        .headers()
        .get("grpc-status")
        .is_some_and(|status| status.as_bytes() != b"0" && status.as_bytes() != b"14");
    if failed {
        counters.requests_rejected.fetch_add(1, Ordering::Relaxed);
    }
    response
}

/// The router that answers both protocols.
pub(crate) fn router(intake: Intake) -> Router {
    let limit = intake.limit;
    let grpc = tonic::service::Routes::new(
        TraceServiceServer::new(GrpcTraces(intake.clone()))
            .accept_compressed(CompressionEncoding::Gzip)
            .max_decoding_message_size(limit),
    )
    .add_service(
        MetricsServiceServer::new(GrpcMetrics(intake.clone()))
            .accept_compressed(CompressionEncoding::Gzip)
            .max_decoding_message_size(limit),
    )
    .into_axum_router();
    let counters = Arc::clone(&intake.forwarding.counters);
    Router::new()
        .route("/v1/traces", post(http_traces))
        .route("/v1/metrics", post(http_metrics))
        .with_state(intake)
        .merge(grpc)
        .layer(axum::middleware::map_response_with_state(
            counters,
            count_grpc_rejections,
        ))
}

/// Binds `addr` (port 0: a free port) and serves `router` until `stop` resolves.
pub(crate) async fn serve(
    addr: SocketAddr,
    router: Router,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, router)
            .with_graceful_shutdown(stop)
            .await;
    });
    Ok((local, task))
}

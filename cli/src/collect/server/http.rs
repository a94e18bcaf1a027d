//! OTLP/HTTP: `/v1/traces` and `/v1/metrics`, in protobuf or JSON. The body is read within
//! its time and size limits and decompressed here; refusals carry the `google.rpc.Status` body
//! and, for a retry, `Retry-After`.

use std::borrow::Cow;
use std::sync::atomic::Ordering;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceResponse;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceResponse;

use super::{Intake, Refusal, Signal, BODY_TIMEOUT, RETRY_AFTER_SECS};
use crate::collect::decode::{self, Format, Rejection};

/// The routes of both exports.
pub(super) fn routes(intake: Intake) -> Router {
    Router::new()
        .route("/v1/traces", post(http_traces))
        .route("/v1/metrics", post(http_metrics))
        .with_state(intake)
}

impl Intake {
    /// HTTP 503 with `Retry-After` and a `google.rpc.Status` of `UNAVAILABLE`: the OTLP/HTTP
    /// specification's "retry later" (429, 502, 503 and 504 are retryable).
    fn refuse(&self, format: Format, message: String) -> Response {
        let body = decode::error_body(format, &Rejection::new(503, message));
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

    fn answer(&self, format: Format, refusal: Refusal) -> Response {
        match refusal {
            Refusal::Rejected(rejection) => self.reject(format, &rejection),
            Refusal::Later(message) => self.refuse(format, message),
        }
    }

    /// Size, time and encoding checks, then the decompressed body (the received bytes
    /// themselves when there was no encoding: a 16 MiB body is not held twice).
    async fn body(
        &self,
        format: Format,
        headers: &HeaderMap,
        body: Body,
    ) -> Result<Bytes, Response> {
        let limit = self.limit;
        let read = axum::body::to_bytes(body, limit);
        let bytes = match tokio::time::timeout(BODY_TIMEOUT, read).await {
            Ok(Ok(bytes)) => bytes,
            Ok(Err(_)) => {
                let r = Rejection::new(
                    413,
                    format!(
                        "request body is over {limit} bytes (or was cut short); send smaller \
                         batches"
                    ),
                );
                return Err(self.reject(format, &r));
            }
            Err(_) => {
                let r = Rejection::new(
                    408,
                    format!(
                        "the request body did not arrive within {} s",
                        BODY_TIMEOUT.as_secs()
                    ),
                );
                return Err(self.reject(format, &r));
            }
        };
        let encoding = headers
            .get(header::CONTENT_ENCODING)
            .and_then(|v: &HeaderValue| v.to_str().ok());
        match decode::decompress(encoding, &bytes, limit) {
            Ok(Cow::Borrowed(_)) => Ok(bytes.clone()),
            Ok(Cow::Owned(decompressed)) => Ok(Bytes::from(decompressed)),
            Err(r) => Err(self.reject(format, &r)),
        }
    }

    /// An OTLP/HTTP export.
    async fn http(&self, signal: Signal, headers: HeaderMap, body: Body) -> Response {
        let content_type = headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok());
        let format = match Format::from_content_type(content_type) {
            Ok(format) => format,
            Err(r) => return self.reject(Format::Protobuf, &r),
        };
        let slot = match self.slot().await {
            Ok(slot) => slot,
            Err(refusal) => return self.answer(format, refusal),
        };
        let raw = match self.body(format, &headers, body).await {
            Ok(raw) => raw,
            Err(response) => return response,
        };
        let admitted = self.admit(signal, format, &raw);
        drop(raw);
        drop(slot);
        match admitted {
            Ok(admitted) => {
                self.queue(admitted);
                let reply = match signal {
                    Signal::Traces => encode(format, &ExportTraceServiceResponse::default()),
                    Signal::Metrics => encode(format, &ExportMetricsServiceResponse::default()),
                };
                (
                    StatusCode::OK,
                    [(header::CONTENT_TYPE, format.content_type())],
                    reply,
                )
                    .into_response()
            }
            Err(refusal) => self.answer(format, refusal),
        }
    }
}

async fn http_traces(State(intake): State<Intake>, headers: HeaderMap, body: Body) -> Response {
    intake.http(Signal::Traces, headers, body).await
}

async fn http_metrics(State(intake): State<Intake>, headers: HeaderMap, body: Body) -> Response {
    intake.http(Signal::Metrics, headers, body).await
}

fn encode<T: prost::Message + serde::Serialize>(format: Format, message: &T) -> Vec<u8> {
    match format {
        Format::Protobuf => message.encode_to_vec(),
        Format::Json => serde_json::to_vec(message).unwrap_or_else(|_| b"{}".to_vec()),
    }
}

//! The OTLP/HTTP server: `POST /v1/traces` and `POST /v1/metrics` with axum, protobuf or
//! JSON bodies, gzip or not.

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{header, HeaderMap, StatusCode as HttpStatus};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use prost::Message;

use super::recording::Shared;
use super::{RequestHeaders, Signal};

pub(super) async fn serve_http(
    listener: tokio::net::TcpListener,
    shared: Arc<Shared>,
    tls: Option<crate::tls::ServerTls>,
) {
    let app = axum::Router::new()
        .route("/v1/traces", post(http_traces))
        .route("/v1/metrics", post(http_metrics))
        .layer(DefaultBodyLimit::disable())
        .with_state(shared);
    match tls {
        None => axum::serve(listener, app)
            .await
            .expect("OTLP/HTTP test receiver failed"),
        Some(tls) => serve_https(listener, app, tls).await,
    }
}

/// OTLP/HTTP over TLS: each connection's handshake, then hyper serving `app` on it. A
/// refused handshake ends that connection only.
async fn serve_https(
    listener: tokio::net::TcpListener,
    app: axum::Router,
    tls: crate::tls::ServerTls,
) {
    use hyper_util::rt::{TokioExecutor, TokioIo};
    let acceptor = tokio_rustls::TlsAcceptor::from(tls.rustls());
    loop {
        let Ok((tcp, _)) = listener.accept().await else {
            continue;
        };
        let acceptor = acceptor.clone();
        let app = app.clone();
        tokio::spawn(async move {
            let Ok(stream) = acceptor.accept(tcp).await else {
                return;
            };
            let service = hyper_util::service::TowerToHyperService::new(app);
            let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

/// Why an OTLP/HTTP request was refused, sent back as a plain-text body.
type Rejection = (HttpStatus, String);

async fn http_traces(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, Rejection> {
    if !shared.admit(Signal::Traces).await {
        return Err((
            HttpStatus::SERVICE_UNAVAILABLE,
            "the test collector is down".into(),
        ));
    }
    let encoding = BodyEncoding::of(&headers)?;
    let body = gunzip(&headers, body)?;
    let request: ExportTraceServiceRequest = encoding.decode(&body)?;
    shared.record_traces(RequestHeaders::from_http(Signal::Traces, &headers), request);
    Ok(encoding.reply(&ExportTraceServiceResponse::default()))
}

async fn http_metrics(
    State(shared): State<Arc<Shared>>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, Rejection> {
    if !shared.admit(Signal::Metrics).await {
        return Err((
            HttpStatus::SERVICE_UNAVAILABLE,
            "the test collector is down".into(),
        ));
    }
    let encoding = BodyEncoding::of(&headers)?;
    let body = gunzip(&headers, body)?;
    let request: ExportMetricsServiceRequest = encoding.decode(&body)?;
    shared.record_metrics(
        RequestHeaders::from_http(Signal::Metrics, &headers),
        request,
    );
    Ok(encoding.reply(&ExportMetricsServiceResponse::default()))
}

/// The body, decompressed when the request says `content-encoding: gzip`.
fn gunzip(headers: &HeaderMap, body: Bytes) -> Result<Bytes, Rejection> {
    use std::io::Read as _;
    match headers.get(header::CONTENT_ENCODING).map(|v| v.as_bytes()) {
        None | Some(b"identity") => Ok(body),
        Some(b"gzip") => {
            let mut out = Vec::new();
            flate2::read::GzDecoder::new(&body[..])
                .read_to_end(&mut out)
                .map_err(|e| (HttpStatus::BAD_REQUEST, format!("bad gzip body: {e}")))?;
            Ok(Bytes::from(out))
        }
        Some(other) => Err((
            HttpStatus::UNSUPPORTED_MEDIA_TYPE,
            format!(
                "unsupported content-encoding {}",
                String::from_utf8_lossy(other)
            ),
        )),
    }
}

/// The two OTLP/HTTP body encodings; the reply uses the request's.
#[derive(Clone, Copy)]
enum BodyEncoding {
    Protobuf,
    Json,
}

impl BodyEncoding {
    fn of(headers: &HeaderMap) -> Result<BodyEncoding, Rejection> {
        let content_type = headers
            .get(header::CONTENT_TYPE)
            .and_then(|value| value.to_str().ok())
            .unwrap_or("");
        if content_type.starts_with("application/x-protobuf") {
            Ok(BodyEncoding::Protobuf)
        } else if content_type.starts_with("application/json") {
            Ok(BodyEncoding::Json)
        } else {
            let message = format!("unsupported content-type {content_type:?}");
            Err((HttpStatus::UNSUPPORTED_MEDIA_TYPE, message))
        }
    }

    fn content_type(self) -> &'static str {
        match self {
            BodyEncoding::Protobuf => "application/x-protobuf",
            BodyEncoding::Json => "application/json",
        }
    }

    fn decode<T>(self, body: &[u8]) -> Result<T, Rejection>
    where
        T: Message + Default + serde::de::DeserializeOwned,
    {
        let decoded = match self {
            BodyEncoding::Protobuf => T::decode(body).map_err(|e| e.to_string()),
            BodyEncoding::Json => serde_json::from_slice(body).map_err(|e| e.to_string()),
        };
        decoded.map_err(|error| {
            let message = format!("cannot decode the OTLP request: {error}");
            (HttpStatus::BAD_REQUEST, message)
        })
    }

    fn reply<T>(self, response: &T) -> Response
    where
        T: Message + serde::Serialize,
    {
        let body = match self {
            BodyEncoding::Protobuf => response.encode_to_vec(),
            BodyEncoding::Json => serde_json::to_vec(response).expect("encode an OTLP response"),
        };
        ([(header::CONTENT_TYPE, self.content_type())], body).into_response()
    }
}

//! The OTLP receiver: one router that answers OTLP/HTTP (`/v1/traces`, `/v1/metrics`) and
//! OTLP/gRPC on every port it listens on. Handlers read, bound, decode, count and queue;
//! they never wait on the forward target.
//!
//! A request is read, decompressed and decoded in one of a few slots, so bodies held at
//! once are bounded. Before it is decoded, what decoding it will allocate is found from
//! the body itself ([`super::bound`]) and taken from the forward queue's room
//! ([`super::budget`]); once decoded, it keeps the room it holds with its spans' memory
//! figures. A request larger than the whole bound is refused for good (HTTP 413, gRPC
//! `RESOURCE_EXHAUSTED`, naming the bound and its setting); one that finds no room now is
//! refused with what OTLP exporters retry (HTTP 503 with `Retry-After`, gRPC
//! `UNAVAILABLE`), so its sender keeps it instead of losing it.

use std::borrow::Cow;
use std::convert::Infallible;
use std::future::Future;
use std::marker::PhantomData;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use prost::bytes::Buf;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tonic::codec::{CompressionEncoding, DecodeBuf, EncodeBuf};

use super::bound::{self, Foreseen};
use super::budget::{give_back_memory, Budget, NoRoom, Room};
use super::decode::{self, Format, Rejection};
use super::pipeline::{Counters, Forwarding};
use super::size;

/// Seconds a refused sender is asked to wait before it sends again.
pub(crate) const RETRY_AFTER_SECS: u32 = 2;

/// How long a request waits for a slot before it is asked to retry later.
const SLOT_WAIT: Duration = Duration::from_secs(10);

/// How long a request's body may take to arrive once it has a slot: a sender that trickles
/// its body does not keep the slot longer.
const BODY_TIMEOUT: Duration = Duration::from_secs(30);

/// Where received requests go.
#[derive(Clone)]
pub(crate) struct Intake {
    forwarding: Arc<Forwarding>,
    /// The queue's room in decoded bytes.
    budget: Budget,
    /// Largest request body, compressed or not.
    limit: usize,
    /// Requests read, decompressed and decoded at once.
    slots: Arc<Semaphore>,
}

/// Which export a request is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Signal {
    Traces,
    Metrics,
}

/// A decoded request with the room it holds, ready to queue.
enum Admitted {
    Traces(ExportTraceServiceRequest, Room),
    Metrics(ExportMetricsServiceRequest, Room),
}

/// Why a request was not taken in.
enum Refusal {
    /// Malformed, or too large for the bound: answered with the protocol's error.
    Rejected(Rejection),
    /// Not now (the queue is full, or every slot is busy): its sender retries it.
    Later(String),
}

impl Intake {
    pub(crate) fn new(
        forwarding: Arc<Forwarding>,
        budget: Budget,
        limit: usize,
        concurrent: usize,
    ) -> Self {
        Self {
            forwarding,
            budget,
            limit,
            slots: Arc::new(Semaphore::new(concurrent.clamp(1, Semaphore::MAX_PERMITS))),
        }
    }

    /// A slot to read and decode a request in, waiting for one at most [`SLOT_WAIT`].
    async fn slot(&self) -> Result<OwnedSemaphorePermit, Refusal> {
        let slot = Arc::clone(&self.slots).acquire_owned();
        match tokio::time::timeout(SLOT_WAIT, slot).await {
            Ok(Ok(slot)) => Ok(slot),
            _ => Err(self.later(
                "the collector is busy reading other requests (gpuspan collect \
                 --max-concurrent-requests); retry later"
                    .into(),
            )),
        }
    }

    /// Finds what `body` will hold decoded, takes room for it, decodes it, and keeps the
    /// room it holds (with the memory figures its spans may get); or refuses it.
    fn admit(&self, signal: Signal, format: Format, body: &[u8]) -> Result<Admitted, Refusal> {
        let total = self.budget.total();
        let foreseen = match signal {
            Signal::Traces => bound::traces(format, body, total),
            Signal::Metrics => bound::metrics(format, body, total),
        }
        .map_err(Refusal::Rejected)?;
        let decoded = match foreseen {
            Foreseen::AtMost(bytes) => bytes,
            Foreseen::Over(bytes) => {
                return Err(self.no_room(NoRoom::TooLarge, bytes, "at least, once decoded"))
            }
        };
        let mut room = self
            .budget
            .take(decoded)
            .map_err(|no| self.no_room(no, decoded, "once decoded"))?;
        // Once decoded, the room it holds, with the figures its spans may get.
        let keep = |room: &mut Room, holds: usize| {
            room.resize(holds).map_err(|no| {
                give_back_memory(decoded);
                self.no_room(no, holds, "once decoded and given its memory figures")
            })
        };
        match signal {
            Signal::Traces => {
                let request = decode::traces(format, body).map_err(Refusal::Rejected)?;
                let holds =
                    size::traces(&request).saturating_add(self.forwarding.enrichment(&request));
                keep(&mut room, holds)?;
                Ok(Admitted::Traces(request, room))
            }
            Signal::Metrics => {
                let request = decode::metrics(format, body).map_err(Refusal::Rejected)?;
                keep(&mut room, size::metrics(&request))?;
                Ok(Admitted::Metrics(request, room))
            }
        }
    }

    fn queue(&self, admitted: Admitted) {
        match admitted {
            Admitted::Traces(request, room) => self.forwarding.traces(request, room),
            Admitted::Metrics(request, room) => self.forwarding.metrics(request, room),
        }
    }

    fn no_room(&self, no: NoRoom, bytes: usize, when: &str) -> Refusal {
        match no {
            NoRoom::TooLarge => Refusal::Rejected(Rejection::new(
                413,
                format!(
                    "the request would hold {bytes} bytes {when}, more than the collector's \
                     forward queue holds in all ({} bytes); send smaller batches, or raise \
                     the bound with gpuspan collect --max-queue-bytes",
                    self.budget.total()
                ),
            )),
            NoRoom::Full => self.later(format!(
                "the collector's forward queue is full ({} bytes of decoded requests wait \
                 to be forwarded); retry later",
                self.budget.total()
            )),
        }
    }

    /// A refusal to retry later, counted.
    fn later(&self, message: String) -> Refusal {
        self.forwarding
            .counters
            .requests_refused
            .fetch_add(1, Ordering::Relaxed);
        Refusal::Later(message)
    }

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

/// One OTLP/gRPC export service. tonic reads and decompresses the message (at most the
/// request limit); the intake bounds and decodes it in place of a protobuf codec.
trait GrpcSignal: Send + Sync + 'static {
    const NAME: &'static str;
    const PATH: &'static str;
    const SIGNAL: Signal;
    type Reply: prost::Message + Default + Send + 'static;
}

struct GrpcTraces;
struct GrpcMetrics;

impl GrpcSignal for GrpcTraces {
    const NAME: &'static str = "opentelemetry.proto.collector.trace.v1.TraceService";
    const PATH: &'static str = "/opentelemetry.proto.collector.trace.v1.TraceService/Export";
    const SIGNAL: Signal = Signal::Traces;
    type Reply = ExportTraceServiceResponse;
}

impl GrpcSignal for GrpcMetrics {
    const NAME: &'static str = "opentelemetry.proto.collector.metrics.v1.MetricsService";
    const PATH: &'static str = "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export";
    const SIGNAL: Signal = Signal::Metrics;
    type Reply = ExportMetricsServiceResponse;
}

/// The gRPC status of a refusal: `RESOURCE_EXHAUSTED` for too large, `INVALID_ARGUMENT`
/// for malformed, `UNAVAILABLE` (which OTLP/gRPC exporters retry with backoff) for later.
fn grpc_status(refusal: Refusal) -> tonic::Status {
    match refusal {
        Refusal::Rejected(r) if r.status == 413 => tonic::Status::resource_exhausted(r.message),
        Refusal::Rejected(r) => tonic::Status::invalid_argument(r.message),
        Refusal::Later(message) => tonic::Status::unavailable(message),
    }
}

/// The `Export` method of `S`'s service.
struct GrpcExport<S> {
    intake: Intake,
    signal: PhantomData<fn() -> S>,
}

impl<S> Clone for GrpcExport<S> {
    fn clone(&self) -> Self {
        Self {
            intake: self.intake.clone(),
            signal: PhantomData,
        }
    }
}

impl<S: GrpcSignal> tonic::server::NamedService for GrpcExport<S> {
    const NAME: &'static str = S::NAME;
}

type Answered = Pin<
    Box<dyn Future<Output = Result<axum::http::Response<tonic::body::Body>, Infallible>> + Send>,
>;

impl<S: GrpcSignal> tower::Service<axum::http::Request<tonic::body::Body>> for GrpcExport<S> {
    type Response = axum::http::Response<tonic::body::Body>;
    type Error = Infallible;
    type Future = Answered;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: axum::http::Request<tonic::body::Body>) -> Answered {
        let intake = self.intake.clone();
        Box::pin(async move {
            if request.uri().path() != S::PATH {
                let status = tonic::Status::unimplemented("OTLP/gRPC has only Export");
                return Ok(status.into_http());
            }
            let slot = match intake.slot().await {
                Ok(slot) => slot,
                Err(refusal) => return Ok(grpc_status(refusal).into_http()),
            };
            let codec = AdmitCodec::<S> {
                intake: intake.clone(),
                signal: PhantomData,
            };
            let mut grpc = tonic::server::Grpc::new(codec)
                .accept_compressed(CompressionEncoding::Gzip)
                .max_decoding_message_size(intake.limit);
            let answer = grpc.unary(QueueExport::<S>(intake, PhantomData), request);
            let response = match tokio::time::timeout(BODY_TIMEOUT, answer).await {
                Ok(response) => response,
                Err(_) => tonic::Status::deadline_exceeded(format!(
                    "the request did not arrive within {} s",
                    BODY_TIMEOUT.as_secs()
                ))
                .into_http(),
            };
            drop(slot);
            Ok(response)
        })
    }
}

/// Queues what the codec admitted, and answers.
struct QueueExport<S>(Intake, PhantomData<fn() -> S>);

impl<S: GrpcSignal> tower::Service<tonic::Request<Admitted>> for QueueExport<S> {
    type Response = tonic::Response<S::Reply>;
    type Error = tonic::Status;
    type Future = std::future::Ready<Result<tonic::Response<S::Reply>, tonic::Status>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), tonic::Status>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: tonic::Request<Admitted>) -> Self::Future {
        self.0.queue(request.into_inner());
        std::future::ready(Ok(tonic::Response::new(S::Reply::default())))
    }
}

/// tonic's codec for `S`: the message is admitted (bounded, given room, decoded) by the
/// intake; the reply is protobuf.
struct AdmitCodec<S> {
    intake: Intake,
    signal: PhantomData<fn() -> S>,
}

impl<S: GrpcSignal> tonic::codec::Codec for AdmitCodec<S> {
    type Encode = S::Reply;
    type Decode = Admitted;
    type Encoder = ReplyEncoder<S::Reply>;
    type Decoder = AdmitDecoder;

    fn encoder(&mut self) -> Self::Encoder {
        ReplyEncoder(PhantomData)
    }

    fn decoder(&mut self) -> Self::Decoder {
        AdmitDecoder {
            intake: self.intake.clone(),
            signal: S::SIGNAL,
        }
    }
}

struct ReplyEncoder<R>(PhantomData<fn(R)>);

impl<R: prost::Message> tonic::codec::Encoder for ReplyEncoder<R> {
    type Item = R;
    type Error = tonic::Status;

    fn encode(&mut self, reply: R, out: &mut EncodeBuf<'_>) -> Result<(), tonic::Status> {
        reply
            .encode(out)
            .map_err(|e| tonic::Status::internal(format!("cannot encode the reply: {e}")))
    }
}

struct AdmitDecoder {
    intake: Intake,
    signal: Signal,
}

impl tonic::codec::Decoder for AdmitDecoder {
    type Item = Admitted;
    type Error = tonic::Status;

    fn decode(&mut self, message: &mut DecodeBuf<'_>) -> Result<Option<Admitted>, tonic::Status> {
        let len = message.remaining();
        let admitted = if message.chunk().len() == len {
            let admitted = self
                .intake
                .admit(self.signal, Format::Protobuf, message.chunk());
            message.advance(len);
            admitted
        } else {
            let copy = message.copy_to_bytes(len);
            self.intake.admit(self.signal, Format::Protobuf, &copy)
        };
        admitted.map(Some).map_err(grpc_status)
    }
}

/// Counts gRPC requests answered with an error (malformed, too large, a slow body): their
/// replies carry a non-zero `grpc-status` header. `UNAVAILABLE` (14) is the refusal to
/// retry later, counted where it is decided.
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
    let grpc = tonic::service::Routes::new(GrpcExport::<GrpcTraces> {
        intake: intake.clone(),
        signal: PhantomData,
    })
    .add_service(GrpcExport::<GrpcMetrics> {
        intake: intake.clone(),
        signal: PhantomData,
    })
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

/// What a connection may hold before a request of it is read (see
/// [`super::CONNECTION_BYTES`]): an HTTP/1.1 request head, and its read buffer.
const HEAD_BYTES: usize = 64 << 10;
/// How long an HTTP/1.1 request head may take to arrive (also how long a kept-alive
/// connection waits for its next request).
const HEAD_TIMEOUT: Duration = Duration::from_secs(30);
/// HTTP/2 streams a connection may have open at once (an OTLP exporter sends one request at
/// a time), the size of their headers, and the flow-control windows that bound the bodies
/// received before they are read.
const STREAMS: u32 = 4;
const HEADER_LIST_BYTES: u32 = 16 << 10;
const WINDOW_BYTES: u32 = 64 << 10;
const SEND_BUFFER_BYTES: usize = 16 << 10;

/// Connections served at once, on every address together.
pub(crate) fn connection_limit(connections: usize) -> Arc<Semaphore> {
    Arc::new(Semaphore::new(connections.clamp(1, Semaphore::MAX_PERMITS)))
}

/// Binds `addr` (port 0: a free port) and serves `router` until `stop` resolves, each
/// connection holding one of `connections` (the others wait to be accepted).
pub(crate) async fn serve(
    addr: SocketAddr,
    router: Router,
    connections: Arc<Semaphore>,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::io::Result<(SocketAddr, tokio::task::JoinHandle<()>)> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    let local = listener.local_addr()?;
    let task = tokio::spawn(accept(listener, router, connections, stop));
    Ok((local, task))
}

/// The server's settings: what one connection may hold, see the constants above.
fn connection_builder() -> Builder<TokioExecutor> {
    let mut builder = Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(HEAD_TIMEOUT)
        .max_buf_size(HEAD_BYTES);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(STREAMS)
        .max_header_list_size(HEADER_LIST_BYTES)
        .initial_stream_window_size(WINDOW_BYTES)
        .initial_connection_window_size(WINDOW_BYTES)
        .max_send_buf_size(SEND_BUFFER_BYTES);
    builder
}

/// Accepts connections while fewer than the limit are open, until `stop`; then lets the
/// open ones finish.
async fn accept(
    listener: tokio::net::TcpListener,
    router: Router,
    connections: Arc<Semaphore>,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) {
    let builder = connection_builder();
    let graceful = GracefulShutdown::new();
    let mut stop = std::pin::pin!(stop);
    loop {
        let connection = tokio::select! {
            permit = Arc::clone(&connections).acquire_owned() => permit,
            () = &mut stop => break,
        };
        let Ok(connection) = connection else { break };
        let stream = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut stop => break,
        };
        let stream = match stream {
            Ok((stream, _)) => stream,
            Err(_) => {
                // Out of file descriptors, or a connection reset before it was accepted.
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let service = TowerToHyperService::new(router.clone());
        let served = builder
            .serve_connection_with_upgrades(TokioIo::new(stream), service)
            .into_owned();
        let served = graceful.watch(served);
        tokio::spawn(async move {
            let _ = served.await;
            drop(connection);
        });
    }
    drop(listener);
    graceful.shutdown().await;
}

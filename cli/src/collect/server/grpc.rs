//! OTLP/gRPC: the `Export` method of the trace and metrics services. tonic reads and
//! decompresses the message; the intake bounds and decodes it in place of a protobuf codec,
//! so a request is never decoded before its room is taken.

use std::convert::Infallible;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::task::{Context, Poll};

use axum::extract::State;
use axum::response::Response;
use axum::Router;
use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceResponse;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceResponse;
use prost::bytes::Buf;
use tonic::codec::{CompressionEncoding, DecodeBuf, EncodeBuf};

use super::{Admitted, Intake, Refusal, Signal, BODY_TIMEOUT};
use crate::collect::decode::Format;
use crate::collect::pipeline::Counters;

/// The routes of both services.
pub(super) fn routes(intake: Intake) -> Router {
    tonic::service::Routes::new(GrpcExport::<GrpcTraces> {
        intake: intake.clone(),
        signal: PhantomData,
    })
    .add_service(GrpcExport::<GrpcMetrics> {
        intake,
        signal: PhantomData,
    })
    .into_axum_router()
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
pub(super) async fn count_grpc_rejections(
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

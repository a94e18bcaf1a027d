//! A request-level OTLP client, for requests that are already built (what the collector
//! forwards): opentelemetry-otlp's exporters take SDK spans and metrics only.
//!
//! The transport is set up as the SDK's exporters set theirs up (same metadata and HTTP
//! client, with the resolved headers, timeout and compression), once per target. A request
//! is encoded straight from the shared copy the export queue keeps for its retries: tonic's
//! generated clients take the message by value, which would need a copy of the decoded
//! request (about 8 times its protobuf) for every attempt.

use std::marker::PhantomData;
use std::sync::Arc;

use bytes::Bytes;
use opentelemetry_http::HttpClient as _;
use opentelemetry_proto::tonic::collector::metrics::v1::{
    ExportMetricsServiceRequest, ExportMetricsServiceResponse,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use prost::Message as _;
use tonic::codec::{Codec, CompressionEncoding, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::metadata::MetadataMap;

use super::http::{ClientError, WireClient};
use super::tls;
use super::HeaderError;
use crate::config::{Compression, OtlpTarget, Protocol};
use crate::export::transport_note::{error_chain, is_tls_failure};

/// An OTLP export request of one signal.
pub trait OtlpRequest: prost::Message + Send + Sync + 'static {
    /// The gRPC method.
    const GRPC_PATH: &'static str;
    /// The reply the method returns.
    type Reply: prost::Message + Default + Send + Sync + 'static;
}

impl OtlpRequest for ExportTraceServiceRequest {
    const GRPC_PATH: &'static str = "/opentelemetry.proto.collector.trace.v1.TraceService/Export";
    type Reply = ExportTraceServiceResponse;
}

impl OtlpRequest for ExportMetricsServiceRequest {
    const GRPC_PATH: &'static str =
        "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export";
    type Reply = ExportMetricsServiceResponse;
}

/// A request its owner keeps for retries, encoded in place from the shared copy.
pub trait SharedRequest: Send + Sync + 'static {
    /// The request shared.
    type Request: OtlpRequest;
    /// The request, to encode.
    fn request(&self) -> &Self::Request;
}

/// Why a client could not be set up, or a request was not accepted.
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    /// The endpoint is not a URL gRPC can connect to.
    #[error("{endpoint} is not a gRPC endpoint URL ({source})")]
    Endpoint {
        /// The endpoint.
        endpoint: String,
        #[source]
        /// Why.
        source: tonic::transport::Error,
    },
    /// A header cannot go on the wire.
    #[error(transparent)]
    Header(#[from] HeaderError),
    /// The HTTP client cannot be built.
    #[error(transparent)]
    Client(#[from] ClientError),
    /// The gRPC endpoint cannot be reached.
    #[error("cannot reach the gRPC endpoint: {}", error_chain(.0))]
    Connect(#[source] tonic::transport::Error),
    /// The TLS handshake failed: the endpoint, what its certificate was checked against,
    /// and the TLS error.
    #[error("the TLS handshake with {endpoint} failed, its certificate checked against {trust}: {detail}")]
    Tls {
        /// The endpoint.
        endpoint: String,
        /// The CA given, or the system's roots.
        trust: String,
        /// The transport's error.
        detail: String,
    },
    /// The gRPC endpoint answered with an error status.
    #[error("{}: {}", .0.code(), .0.message())]
    Status(tonic::Status),
    /// The HTTP request could not be sent.
    #[error("cannot send the request: {}", error_chain(.0.as_ref()))]
    Send(#[source] opentelemetry_http::HttpError),
    /// The HTTP endpoint answered with an error status.
    #[error("{url} answered {status}")]
    Answered {
        /// The endpoint.
        url: String,
        /// Its HTTP status.
        status: u16,
    },
    /// The HTTP request cannot be built.
    #[error("cannot build the request: {0}")]
    Build(#[from] http::Error),
}

impl RequestError {
    /// Whether sending again may succeed: the OTLP specification's retryable responses
    /// (HTTP 429, 502, 503, 504; gRPC codes of a passing condition), and any failure to
    /// reach the endpoint. A request the destination rejects as such is not sent again.
    pub fn retryable(&self) -> bool {
        use tonic::Code;
        match self {
            Self::Connect(_) | Self::Send(_) | Self::Tls { .. } => true,
            Self::Answered { status, .. } => matches!(status, 429 | 502 | 503 | 504),
            Self::Status(status) => matches!(
                status.code(),
                Code::Cancelled
                    | Code::DeadlineExceeded
                    | Code::Aborted
                    | Code::OutOfRange
                    | Code::Unavailable
                    | Code::DataLoss
                    | Code::ResourceExhausted
            ),
            Self::Endpoint { .. } | Self::Header(_) | Self::Client(_) | Self::Build(_) => false,
        }
    }
}

/// One OTLP target's transport, built once.
#[derive(Debug)]
pub struct RequestClient {
    wire: Wire,
    endpoint: String,
    /// What the endpoint's certificate is checked against, for a failed handshake.
    trust: String,
}

#[derive(Debug)]
enum Wire {
    Grpc {
        channel: tonic::transport::Channel,
        metadata: MetadataMap,
        gzip: bool,
    },
    Http {
        client: WireClient,
        url: String,
    },
}

impl RequestClient {
    /// The transport for `target`; a gRPC channel connects lazily on `runtime`.
    pub(crate) fn new(
        target: &OtlpTarget,
        runtime: &tokio::runtime::Handle,
    ) -> Result<Self, RequestError> {
        let _context = runtime.enter();
        let not_endpoint = |source| RequestError::Endpoint {
            endpoint: target.endpoint.clone(),
            source,
        };
        let wire = match target.protocol {
            Protocol::Grpc => {
                let endpoint = tonic::transport::Endpoint::from_shared(target.endpoint.clone())
                    .map_err(not_endpoint)?
                    .timeout(target.timeout)
                    .connect_timeout(target.timeout);
                let endpoint = match tls::grpc(target) {
                    Some(tls) => endpoint.tls_config(tls).map_err(not_endpoint)?,
                    None => endpoint,
                };
                Wire::Grpc {
                    channel: endpoint.connect_lazy(),
                    metadata: super::grpc::metadata(target)?,
                    gzip: target.compression == Compression::Gzip,
                }
            }
            Protocol::HttpProtobuf => Wire::Http {
                client: WireClient::new(target, None)?,
                url: target.endpoint.clone(),
            },
        };
        Ok(Self {
            wire,
            endpoint: target.endpoint.clone(),
            trust: target.tls.trust(),
        })
    }

    /// Sends one request and waits for the destination's answer; a failed TLS handshake
    /// is said as one.
    pub async fn send<S: SharedRequest>(&self, shared: &Arc<S>) -> Result<(), RequestError> {
        self.send_once(shared).await.map_err(|error| match error {
            RequestError::Connect(_) | RequestError::Send(_) | RequestError::Status(_)
                if is_tls_failure(&error.to_string()) =>
            {
                RequestError::Tls {
                    endpoint: self.endpoint.clone(),
                    trust: self.trust.clone(),
                    detail: error.to_string(),
                }
            }
            other => other,
        })
    }

    async fn send_once<S: SharedRequest>(&self, shared: &Arc<S>) -> Result<(), RequestError> {
        match &self.wire {
            Wire::Grpc {
                channel,
                metadata,
                gzip,
            } => {
                let mut grpc = tonic::client::Grpc::new(channel.clone());
                if *gzip {
                    grpc = grpc.send_compressed(CompressionEncoding::Gzip);
                }
                grpc.ready().await.map_err(RequestError::Connect)?;
                let mut message = tonic::Request::new(Arc::clone(shared));
                *message.metadata_mut() = metadata.clone();
                let path = tonic::codegen::http::uri::PathAndQuery::from_static(
                    <S::Request as OtlpRequest>::GRPC_PATH,
                );
                grpc.unary::<_, <S::Request as OtlpRequest>::Reply, _>(
                    message,
                    path,
                    SharedCodec::<S, <S::Request as OtlpRequest>::Reply>(PhantomData),
                )
                .await
                .map(drop)
                .map_err(RequestError::Status)
            }
            Wire::Http { client, url } => {
                let body = Bytes::from(shared.request().encode_to_vec());
                let post = http::Request::post(url.as_str())
                    .header(http::header::CONTENT_TYPE, "application/x-protobuf")
                    .body(body)?;
                let response = client.send_bytes(post).await.map_err(RequestError::Send)?;
                if response.status().is_success() {
                    Ok(())
                } else {
                    Err(RequestError::Answered {
                        url: url.clone(),
                        status: response.status().as_u16(),
                    })
                }
            }
        }
    }
}

/// Encodes a shared request in place; decodes the reply with prost.
struct SharedCodec<S, Reply>(PhantomData<fn() -> (S, Reply)>);

impl<S, Reply> Codec for SharedCodec<S, Reply>
where
    S: SharedRequest,
    Reply: prost::Message + Default + Send + 'static,
{
    type Encode = Arc<S>;
    type Decode = Reply;
    type Encoder = SharedCodec<S, ()>;
    type Decoder = SharedCodec<(), Reply>;

    fn encoder(&mut self) -> Self::Encoder {
        SharedCodec(PhantomData)
    }

    fn decoder(&mut self) -> Self::Decoder {
        SharedCodec(PhantomData)
    }
}

impl<S: SharedRequest> Encoder for SharedCodec<S, ()> {
    type Item = Arc<S>;
    type Error = tonic::Status;

    fn encode(&mut self, item: Arc<S>, dst: &mut EncodeBuf<'_>) -> Result<(), tonic::Status> {
        prost::Message::encode(item.request(), dst)
            .map_err(|e| tonic::Status::internal(format!("cannot encode the request: {e}")))
    }
}

impl<Reply: prost::Message + Default> Decoder for SharedCodec<(), Reply> {
    type Item = Reply;
    type Error = tonic::Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Reply>, tonic::Status> {
        Reply::decode(src)
            .map(Some)
            .map_err(|e| tonic::Status::internal(format!("cannot decode the reply: {e}")))
    }
}

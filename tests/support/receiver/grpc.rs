//! The OTLP/gRPC server: tonic's `TraceService` and `MetricsService`, gzip accepted.

use std::sync::Arc;

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

use super::recording::Shared;
use super::{RequestHeaders, Signal};

pub(super) async fn serve_grpc(
    listener: tokio::net::TcpListener,
    shared: Arc<Shared>,
    tls: Option<crate::tls::ServerTls>,
) {
    use tonic::transport::{Certificate, Identity, ServerTlsConfig};
    let service = GrpcService { shared };
    let gzip = tonic::codec::CompressionEncoding::Gzip;
    let mut server = tonic::transport::Server::builder();
    if let Some(tls) = tls {
        let mut config =
            ServerTlsConfig::new().identity(Identity::from_pem(&tls.cert_pem, &tls.key_pem));
        if let Some(ca) = &tls.client_ca_pem {
            config = config.client_ca_root(Certificate::from_pem(ca));
        }
        server = server
            .tls_config(config)
            .expect("the receiver's TLS settings");
    }
    server
        .layer(tower::util::MapRequestLayer::new(expose_reserved_headers))
        .add_service(TraceServiceServer::new(service.clone()).accept_compressed(gzip))
        .add_service(MetricsServiceServer::new(service).accept_compressed(gzip))
        .serve_with_incoming(
            // As collectors do: without it, Nagle's algorithm holds each reply ~40 ms.
            tonic::transport::server::TcpIncoming::from(listener).with_nodelay(Some(true)),
        )
        .await
        .expect("OTLP/gRPC test receiver failed");
}

/// tonic keeps `grpc-encoding` out of the request metadata: copy it as
/// `x-received-grpc-encoding` so tests can read the compression a client used.
fn expose_reserved_headers<B>(mut request: http::Request<B>) -> http::Request<B> {
    if let Some(value) = request.headers().get("grpc-encoding").cloned() {
        request
            .headers_mut()
            .insert("x-received-grpc-encoding", value);
    }
    request
}

#[derive(Clone)]
struct GrpcService {
    shared: Arc<Shared>,
}

#[tonic::async_trait]
impl TraceService for GrpcService {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        if !self.shared.admit(Signal::Traces).await {
            return Err(tonic::Status::unavailable("the test collector is down"));
        }
        let headers = grpc_headers(Signal::Traces, &request);
        self.shared.record_traces(headers, request.into_inner());
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

#[tonic::async_trait]
impl MetricsService for GrpcService {
    async fn export(
        &self,
        request: tonic::Request<ExportMetricsServiceRequest>,
    ) -> Result<tonic::Response<ExportMetricsServiceResponse>, tonic::Status> {
        if !self.shared.admit(Signal::Metrics).await {
            return Err(tonic::Status::unavailable("the test collector is down"));
        }
        let headers = grpc_headers(Signal::Metrics, &request);
        self.shared.record_metrics(headers, request.into_inner());
        Ok(tonic::Response::new(ExportMetricsServiceResponse::default()))
    }
}

fn grpc_headers<T>(signal: Signal, request: &tonic::Request<T>) -> RequestHeaders {
    RequestHeaders::from_http(signal, &request.metadata().clone().into_headers())
}

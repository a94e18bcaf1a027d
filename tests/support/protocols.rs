//! Tests that run once over OTLP/gRPC and once over OTLP/HTTP.

/// Defines the tests `over_grpc` and `over_http`, which call `$ship` with the protocol's
/// name as `OTEL_EXPORTER_OTLP_PROTOCOL` takes it.
#[macro_export]
macro_rules! tests_over_grpc_and_http {
    ($ship:path) => {
        #[test]
        fn over_grpc() {
            $ship("grpc");
        }

        #[test]
        fn over_http() {
            $ship("http/protobuf");
        }
    };
}

//! The receiver itself: its endpoints point at the port it bound, nothing listens once it
//! stops, it reads OTLP/JSON, and it records nothing of a body it cannot decode.

use super::*;

#[test]
fn endpoints_point_at_the_bound_port() {
    let grpc = Receiver::start_grpc();
    let http = Receiver::start_http();
    assert_eq!(grpc.endpoint(), format!("http://127.0.0.1:{}", grpc.port()));
    assert_eq!(http.endpoint(), format!("http://127.0.0.1:{}", http.port()));
    assert_eq!(http.traces_url(), format!("{}/v1/traces", http.endpoint()));
    assert_eq!(
        http.metrics_url(),
        format!("{}/v1/metrics", http.endpoint())
    );
    assert_ne!(grpc.port(), http.port());
}

#[test]
fn nothing_listens_on_an_unused_endpoint_or_a_stopped_receiver() {
    let endpoint = unused_endpoint();
    let addr = endpoint.trim_start_matches("http://");
    assert!(std::net::TcpStream::connect(addr).is_err(), "{endpoint}");

    let mut receiver = Receiver::start_http();
    let addr = format!("127.0.0.1:{}", receiver.port());
    assert!(std::net::TcpStream::connect(&addr).is_ok());
    receiver.stop();
    assert!(std::net::TcpStream::connect(&addr).is_err());
    receiver.stop();
}

#[test]
fn http_receiver_accepts_otlp_json() {
    use std::io::{Read as _, Write as _};

    let receiver = Receiver::start_http();
    let body = r#"{"resourceSpans":[{"resource":{"attributes":[
        {"key":"service.name","value":{"stringValue":"json-client"}}]},
        "scopeSpans":[{"scope":{"name":"json-scope"},"spans":[{
        "traceId":"5b8efff798038103d269b633813fc60c","spanId":"eee19b7ec3c1b174",
        "parentSpanId":"eee19b7ec3c1b173","name":"from-json","kind":2,
        "startTimeUnixNano":"1000","endTimeUnixNano":"2000",
        "attributes":[{"key":"n","value":{"intValue":"42"}}],
        "status":{"code":2,"message":"boom"}}]}]}]}"#;
    let request = format!(
        "POST /v1/traces HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
         X-Api-Key: {API_KEY_VALUE}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let mut stream =
        std::net::TcpStream::connect(receiver.endpoint().trim_start_matches("http://"))
            .expect("connect to the receiver");
    stream.write_all(request.as_bytes()).expect("send");
    let mut response = String::new();
    stream
        .read_to_string(&mut response)
        .expect("read the reply");
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    assert!(response.contains("application/json"), "{response}");

    let span = only(receiver.spans());
    assert_eq!(span.name, "from-json");
    assert_eq!(span.trace_id, "5b8efff798038103d269b633813fc60c");
    assert_eq!(span.span_id, "eee19b7ec3c1b174");
    assert_eq!(span.parent_span_id, "eee19b7ec3c1b173");
    assert_eq!(span.kind, SpanKind::Server);
    assert_eq!(
        (span.start_time_unix_nano, span.end_time_unix_nano),
        (1000, 2000)
    );
    assert_eq!(span.int_attr("n"), Some(42));
    assert_eq!(span.status_code, StatusCode::Error);
    assert_eq!(span.status_message, "boom");
    assert_eq!(span.resource_str_attr("service.name"), Some("json-client"));
    assert_eq!(span.scope_name, "json-scope");
    assert_api_key_on_every_request(&receiver.headers());
}

#[test]
fn http_receiver_rejects_an_undecodable_body_and_records_nothing() {
    use std::io::{Read as _, Write as _};

    let receiver = Receiver::start_http();
    let body = [0xff_u8, 0xff, 0xff];
    let head = format!(
        "POST /v1/metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\
         Content-Type: application/x-protobuf\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let mut stream =
        std::net::TcpStream::connect(receiver.endpoint().trim_start_matches("http://"))
            .expect("connect to the receiver");
    stream.write_all(head.as_bytes()).expect("send head");
    stream.write_all(&body).expect("send body");
    let mut response = String::new();
    stream
        .read_to_string(&mut response)
        .expect("read the reply");
    assert!(response.starts_with("HTTP/1.1 400"), "{response}");
    assert_eq!(receiver.metric_requests(), 0);
    assert!(receiver.headers().is_empty());
}

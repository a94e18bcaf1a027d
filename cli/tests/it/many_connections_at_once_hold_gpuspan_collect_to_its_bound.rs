//! What `gpuspan collect` holds for a connection before a request is read is bounded too:
//! a thousand HTTP/1.1 connections that each send a request head that never ends, and
//! HTTP/2 connections that each open as many streams as they may with large headers, leave
//! its peak resident size within its documented bound (connections past the limit wait to
//! be accepted). Once they are gone, a request is received as before.

use gpuspan_test_support as support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use support::collector_process::{CollectorProcess, MIB};
use support::fake_nvml::FakeNvml;
use support::raw_http::post;

/// What the runtime, the sampler and the allocator's free lists may add to the resident
/// size besides what the connections hold.
const SLACK: u64 = 48 * MIB;

/// The bytes of request head each HTTP/1.1 connection sends, never ending it.
const HEAD: usize = 200 << 10;

/// HTTP/1.1 connections opened at once.
const HTTP1: usize = 1000;

/// HTTP/2 connections opened at once, and the streams each tries to open.
const HTTP2: usize = 200;
const STREAMS: usize = 100;

/// A connection that writes what it can without waiting long for the collector to read it.
fn connect(addr: SocketAddr) -> Option<TcpStream> {
    let stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).ok()?;
    stream
        .set_write_timeout(Some(Duration::from_millis(200)))
        .ok()?;
    stream
        .set_read_timeout(Some(Duration::from_millis(200)))
        .ok()?;
    Some(stream)
}

/// An HTTP/1.1 request head that goes on and on.
fn endless_head(addr: SocketAddr) -> Option<TcpStream> {
    let mut stream = connect(addr)?;
    let mut head = b"POST /v1/traces HTTP/1.1\r\nHost: x\r\nX-Pad: ".to_vec();
    head.resize(HEAD, b'a');
    let _ = stream.write_all(&head);
    Some(stream)
}

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let mut out = (payload.len() as u32).to_be_bytes()[1..].to_vec();
    out.extend([kind, flags]);
    out.extend(stream.to_be_bytes());
    out.extend(payload);
    out
}

/// An HPACK integer with a 7-bit prefix.
fn hpack_integer(mut value: usize, out: &mut Vec<u8>) {
    if value < 127 {
        out.push(value as u8);
        return;
    }
    out.push(127);
    value -= 127;
    while value >= 128 {
        out.push((value % 128) as u8 | 0x80);
        value /= 128;
    }
    out.push(value as u8);
}

/// A header as an HPACK literal, not indexed.
fn literal(name: &[u8], value: &[u8], out: &mut Vec<u8>) {
    out.push(0);
    hpack_integer(name.len(), out);
    out.extend(name);
    hpack_integer(value.len(), out);
    out.extend(value);
}

/// An HTTP/2 connection that opens `STREAMS` gRPC exports, each with 15 KB of headers, the
/// first ones with the start of a 16 MiB message.
fn many_streams(addr: SocketAddr) -> Option<TcpStream> {
    let mut stream = connect(addr)?;
    let mut hello = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    hello.extend(frame(4, 0, 0, &[]));
    stream.write_all(&hello).ok()?;
    // The collector's settings, then ours acknowledged; a connection past the limit, not
    // accepted yet, is only kept open.
    let mut settings = [0u8; 4096];
    if !matches!(stream.read(&mut settings), Ok(n) if n > 0) {
        return Some(stream);
    }
    let _ = stream.write_all(&frame(4, 1, 0, &[]));
    let mut headers = Vec::new();
    for (name, value) in [
        (&b":method"[..], &b"POST"[..]),
        (b":scheme", b"http"),
        (
            b":path",
            b"/opentelemetry.proto.collector.trace.v1.TraceService/Export",
        ),
        (b":authority", b"x"),
        (b"content-type", b"application/grpc"),
        (b"te", b"trailers"),
    ] {
        literal(name, value, &mut headers);
    }
    literal(b"x-pad", &[b'p'; 15_000], &mut headers);
    let mut message = vec![0];
    message.extend((16u32 << 20).to_be_bytes());
    message.resize(16 << 10, 0);
    for i in 0..STREAMS as u32 {
        let id = 2 * i + 1;
        let mut frames = frame(1, 4, id, &headers);
        // Bodies within the protocol's first window (64 KiB a connection).
        if i < 3 {
            frames.extend(frame(0, 0, id, &message));
        }
        if stream.write_all(&frames).is_err() {
            break;
        }
    }
    Some(stream)
}

#[test]
fn endless_heads_and_streams_of_headers_stay_within_the_bound() {
    let fake = FakeNvml::build();
    let dir = tempfile::tempdir().unwrap();
    let lib = fake.path().to_string_lossy().into_owned();
    let collector = CollectorProcess::start(
        env!("CARGO_BIN_EXE_gpuspan"),
        &[],
        &[
            ("GPUSPAN_NVML_LIB", &lib),
            ("OTEL_METRICS_EXPORTER", "none"),
        ],
        dir.path(),
    );
    let baseline = collector.memory();
    // The documented bound of what connections hold before a request is read.
    let connections = gpuspan_cli::collect::DEFAULT_MAX_CONNECTIONS as u64
        * gpuspan_cli::collect::CONNECTION_BYTES as u64;
    let limit = baseline.now + connections + SLACK;
    eprintln!(
        "baseline RSS {} MiB; connections at most {} MiB; limit {} MiB",
        baseline.now / MIB,
        connections / MIB,
        limit / MIB
    );

    let heads: Vec<TcpStream> = (0..HTTP1)
        .filter_map(|_| endless_head(collector.http))
        .collect();
    std::thread::sleep(Duration::from_secs(1));
    let memory = collector.memory();
    eprintln!(
        "{} endless heads: RSS {} MiB, peak {} MiB",
        heads.len(),
        memory.now / MIB,
        memory.peak / MIB
    );
    assert!(heads.len() > HTTP1 / 2, "only {} connected", heads.len());
    assert!(
        memory.peak <= limit,
        "{} connections sending endless request heads took the collector's peak RSS to {} \
         MiB, over {} MiB",
        heads.len(),
        memory.peak / MIB,
        limit / MIB
    );
    drop(heads);

    let streams: Vec<TcpStream> = (0..HTTP2)
        .filter_map(|_| many_streams(collector.grpc))
        .collect();
    std::thread::sleep(Duration::from_secs(1));
    let memory = collector.memory();
    eprintln!(
        "{} HTTP/2 connections of {STREAMS} streams: RSS {} MiB, peak {} MiB",
        streams.len(),
        memory.now / MIB,
        memory.peak / MIB
    );
    assert!(
        memory.peak <= limit,
        "{} HTTP/2 connections of {STREAMS} streams took the collector's peak RSS to {} MiB, \
         over {} MiB",
        streams.len(),
        memory.peak / MIB,
        limit / MIB
    );
    drop(streams);

    // Once they are gone, a request is received as before.
    std::thread::sleep(Duration::from_secs(1));
    let request = opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest {
        resource_spans: Vec::new(),
    };
    let reply = post(
        collector.http,
        "/v1/traces",
        &[("Content-Type", "application/x-protobuf")],
        &prost::Message::encode_to_vec(&request),
    );
    assert_eq!(reply.status, 200, "{reply:?}");
}

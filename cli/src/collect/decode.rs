//! OTLP/HTTP request bodies: content type, gzip, size limits, protobuf or JSON, and the
//! protocol's error replies. Pure functions, so every malformed input can be tested without
//! a server.

use std::borrow::Cow;
use std::io::Read;

use opentelemetry_proto::tonic::collector::metrics::v1::ExportMetricsServiceRequest;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;

/// How a body is encoded: the request's `Content-Type`, which the reply uses too.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Format {
    /// `application/x-protobuf`.
    Protobuf,
    /// `application/json`.
    Json,
}

impl Format {
    /// The format named by a `Content-Type` header (parameters such as `charset` ignored).
    pub(crate) fn from_content_type(value: Option<&str>) -> Result<Self, Rejection> {
        let media = value
            .unwrap_or("")
            .split(';')
            .next()
            .unwrap_or("")
            .trim()
            .to_ascii_lowercase();
        match media.as_str() {
            "application/x-protobuf" | "application/protobuf" => Ok(Self::Protobuf),
            "application/json" => Ok(Self::Json),
            other => Err(Rejection::new(
                415,
                format!(
                    "content type '{other}' is not OTLP/HTTP: send application/x-protobuf or \
                     application/json"
                ),
            )),
        }
    }

    /// The `Content-Type` of replies in this format.
    pub(crate) fn content_type(self) -> &'static str {
        match self {
            Self::Protobuf => "application/x-protobuf",
            Self::Json => "application/json",
        }
    }
}

/// A request turned away, with the HTTP status the OTLP/HTTP specification gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Rejection {
    /// 400 (malformed), 408 (a body too slow to arrive), 413 (too large), 415 (content
    /// type or encoding) or 503 (the forward queue is full: retry later).
    pub(crate) status: u16,
    pub(crate) message: String,
}

impl Rejection {
    pub(crate) fn new(status: u16, message: String) -> Self {
        Self { status, message }
    }
}

/// `google.rpc.Status`, the body of an OTLP/HTTP error reply.
#[derive(Clone, PartialEq, prost::Message)]
struct RpcStatus {
    #[prost(int32, tag = "1")]
    code: i32,
    #[prost(string, tag = "2")]
    message: String,
}

/// The body of an error reply: a `google.rpc.Status` in the request's format (protobuf when
/// the request's own content type was not understood).
pub(crate) fn error_body(format: Format, rejection: &Rejection) -> Vec<u8> {
    // gRPC codes: INVALID_ARGUMENT for malformed and unsupported input, DEADLINE_EXCEEDED
    // for too slow, RESOURCE_EXHAUSTED for too large, UNAVAILABLE for "retry later".
    let code = match rejection.status {
        408 => 4,
        413 => 8,
        503 => 14,
        _ => 3,
    };
    match format {
        Format::Protobuf => prost::Message::encode_to_vec(&RpcStatus {
            code,
            message: rejection.message.clone(),
        }),
        Format::Json => serde_json::json!({ "code": code, "message": rejection.message })
            .to_string()
            .into_bytes(),
    }
}

/// The body after `Content-Encoding`, at most `limit` bytes once decompressed (borrowed
/// when there is no encoding).
pub(crate) fn decompress<'a>(
    encoding: Option<&str>,
    body: &'a [u8],
    limit: usize,
) -> Result<Cow<'a, [u8]>, Rejection> {
    let too_large = || {
        Rejection::new(
            413,
            format!("request is over {limit} bytes once decompressed; send smaller batches"),
        )
    };
    match encoding.map(|e| e.trim().to_ascii_lowercase()).as_deref() {
        None | Some("") | Some("identity") => {
            if body.len() > limit {
                return Err(too_large());
            }
            Ok(Cow::Borrowed(body))
        }
        Some("gzip") => {
            let mut out = Vec::new();
            let mut decoder = flate2::read::GzDecoder::new(body).take(limit as u64 + 1);
            decoder.read_to_end(&mut out).map_err(|e| {
                Rejection::new(400, format!("request body is not valid gzip ({e})"))
            })?;
            if out.len() > limit {
                return Err(too_large());
            }
            Ok(Cow::Owned(out))
        }
        Some(other) => Err(Rejection::new(
            415,
            format!("content encoding '{other}' is not supported: send gzip or no encoding"),
        )),
    }
}

/// Decodes a trace export request.
pub(crate) fn traces(format: Format, body: &[u8]) -> Result<ExportTraceServiceRequest, Rejection> {
    decode(format, body, "ExportTraceServiceRequest")
}

/// Decodes a metrics export request.
pub(crate) fn metrics(
    format: Format,
    body: &[u8],
) -> Result<ExportMetricsServiceRequest, Rejection> {
    decode(format, body, "ExportMetricsServiceRequest")
}

fn decode<T>(format: Format, body: &[u8], what: &str) -> Result<T, Rejection>
where
    T: prost::Message + Default + serde::de::DeserializeOwned,
{
    match format {
        Format::Protobuf => T::decode(body)
            .map_err(|e| Rejection::new(400, format!("body is not a protobuf {what} ({e})"))),
        Format::Json => serde_json::from_slice(body)
            .map_err(|e| Rejection::new(400, format!("body is not an OTLP/JSON {what} ({e})"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collect::testing::{request_of, step_span};
    use opentelemetry_proto::tonic::trace::v1::Span;

    fn request() -> ExportTraceServiceRequest {
        request_of(vec![Span {
            start_time_unix_nano: 10,
            end_time_unix_nano: 20,
            ..step_span()
        }])
    }

    #[test]
    fn content_types_map_to_formats_or_415() {
        assert_eq!(
            Format::from_content_type(Some("application/json; charset=utf-8")),
            Ok(Format::Json)
        );
        assert_eq!(
            Format::from_content_type(Some("application/x-protobuf")),
            Ok(Format::Protobuf)
        );
        assert_eq!(
            Format::from_content_type(Some("text/plain"))
                .unwrap_err()
                .status,
            415
        );
        assert_eq!(Format::from_content_type(None).unwrap_err().status, 415);
    }

    #[test]
    fn protobuf_json_and_gzip_round_trip() {
        let bytes = prost::Message::encode_to_vec(&request());
        assert_eq!(traces(Format::Protobuf, &bytes), Ok(request()));
        let json = serde_json::to_vec(&request()).unwrap();
        assert_eq!(traces(Format::Json, &json), Ok(request()));
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        std::io::Write::write_all(&mut gz, &bytes).unwrap();
        let gz = gz.finish().unwrap();
        assert_eq!(
            decompress(Some("gzip"), &gz, 1 << 20).map(Cow::into_owned),
            Ok(bytes.clone())
        );
        assert_eq!(
            decompress(None, &bytes, 1 << 20),
            Ok(Cow::Borrowed(&bytes[..]))
        );
        assert_eq!(
            decompress(Some("br"), &gz, 1 << 20).unwrap_err().status,
            415
        );
    }

    #[test]
    fn a_gzip_bomb_stops_at_the_limit() {
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        std::io::Write::write_all(&mut gz, &vec![0u8; 4 << 20]).unwrap();
        let gz = gz.finish().unwrap();
        assert!(gz.len() < 64 << 10);
        assert_eq!(
            decompress(Some("gzip"), &gz, 1 << 20).unwrap_err().status,
            413
        );
    }

    /// Every truncation and random corruption of a valid body, in both formats and gzip:
    /// decoding never panics, and what fails is a 400.
    #[test]
    fn truncated_and_corrupted_bodies_are_400_never_a_panic() {
        let bytes = prost::Message::encode_to_vec(&request());
        let json = serde_json::to_vec(&request()).unwrap();
        let mut seed = 0x9E37_79B9_7F4A_7C15u64;
        let mut next = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let mut rejected = 0;
        for (format, body) in [(Format::Protobuf, &bytes), (Format::Json, &json)] {
            for cut in 0..body.len() {
                if let Err(r) = traces(format, &body[..cut]) {
                    assert_eq!(r.status, 400);
                    rejected += 1;
                }
                let _ = metrics(format, &body[..cut]);
            }
            for _ in 0..2000 {
                let mut noisy = body.clone();
                for _ in 0..1 + next() % 4 {
                    let i = (next() as usize) % noisy.len();
                    noisy[i] = next() as u8;
                }
                if let Err(r) = traces(format, &noisy) {
                    assert_eq!(r.status, 400);
                }
                let _ = decompress(Some("gzip"), &noisy, 1 << 16);
            }
        }
        assert!(rejected > 50, "only {rejected} truncations were rejected");
        for format in [Format::Protobuf, Format::Json] {
            let reply = error_body(format, &Rejection::new(400, "bad".into()));
            assert!(!reply.is_empty());
        }
    }
}

//! The HTTP client under OTLP/HTTP: reqwest, with the resolved timeout, headers and
//! compression applied to every request after opentelemetry-otlp built it, so nothing it
//! read from the environment can override what was resolved.

use std::io::Write as _;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::header::{HeaderName, HeaderValue, CONTENT_ENCODING};
use http::{Request, Response};
use opentelemetry_http::{HttpClient, HttpError};

use super::tls::{rustls_client, TlsSetupError};
use super::HeaderError;
use crate::config::{Compression, OtlpTarget};
use crate::export::transport_note::{error_chain, TransportNote};

/// See the module docs.
#[derive(Debug)]
pub(super) struct WireClient {
    client: reqwest::Client,
    headers: Vec<(HeaderName, HeaderValue)>,
    gzip: bool,
    /// Where a failed request's transport error is kept (opentelemetry-otlp drops it).
    note: Option<Arc<TransportNote>>,
}

impl WireClient {
    pub(super) fn new(
        target: &OtlpTarget,
        note: Option<Arc<TransportNote>>,
    ) -> Result<Self, ClientError> {
        let client = reqwest::Client::builder()
            .tls_backend_preconfigured(rustls_client(target)?)
            .timeout(target.timeout)
            .connect_timeout(target.timeout.min(Duration::from_secs(10)))
            .build()?;
        let headers = target
            .headers
            .iter()
            .map(|(key, value)| {
                let name = HeaderName::from_bytes(key.as_bytes())
                    .map_err(|_| HeaderError::Name(key.clone()))?;
                let value =
                    HeaderValue::from_str(value).map_err(|_| HeaderError::Value(key.clone()))?;
                Ok((name, value))
            })
            .collect::<Result<_, HeaderError>>()?;
        Ok(Self {
            client,
            headers,
            gzip: target.compression == Compression::Gzip,
            note,
        })
    }
}

/// Why the HTTP client could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// A header cannot go on the wire.
    #[error(transparent)]
    Header(#[from] HeaderError),
    /// The HTTP client cannot be built.
    #[error("cannot build the HTTP client: {0}")]
    Build(#[from] reqwest::Error),
    /// Its TLS cannot be set up.
    #[error(transparent)]
    Tls(#[from] TlsSetupError),
}

#[async_trait::async_trait]
impl HttpClient for WireClient {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let (mut parts, body) = request.into_parts();
        for (name, value) in &self.headers {
            parts.headers.insert(name.clone(), value.clone());
        }
        let body = if self.gzip && !parts.headers.contains_key(CONTENT_ENCODING) {
            let mut encoder =
                flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
            encoder.write_all(&body)?;
            parts
                .headers
                .insert(CONTENT_ENCODING, HeaderValue::from_static("gzip"));
            Bytes::from(encoder.finish()?)
        } else {
            body
        };
        let sent = self
            .client
            .send_bytes(Request::from_parts(parts, body))
            .await;
        if let (Err(error), Some(note)) = (&sent, &self.note) {
            note.saw(&error_chain(error.as_ref()));
        }
        sent
    }
}

//! The words an OTLP export failure is told in: opentelemetry-otlp reports a failed HTTP
//! request only as "network error", so the HTTP client keeps the transport's own error
//! here; and a failure that is TLS's is said as such, with the endpoint and what its
//! certificate was checked against (the CA given, or the system's roots).

use std::sync::{Arc, Mutex};

use crate::config::OtlpTarget;

/// What an export failure to one OTLP endpoint is told with. opentelemetry-otlp reports a
/// failed HTTP request only as "network error", so the HTTP client keeps the last
/// transport error here; a failure that is TLS's is said as such, with what the server's
/// certificate was checked against.
#[derive(Debug)]
pub(crate) struct TransportNote {
    endpoint: String,
    trust: String,
    last: Mutex<Option<String>>,
}

impl TransportNote {
    /// The note for `target`.
    pub(crate) fn new(target: &OtlpTarget) -> Arc<Self> {
        Arc::new(Self {
            endpoint: target.endpoint.clone(),
            trust: target.tls.trust(),
            last: Mutex::new(None),
        })
    }

    /// Keeps the last transport error the HTTP client saw.
    #[cfg_attr(not(feature = "otlp-http"), allow(dead_code))]
    pub(crate) fn saw(&self, error: &str) {
        if let Ok(mut last) = self.last.lock() {
            *last = Some(error.to_owned());
        }
    }

    /// `reason` said fully: the transport's own error where the exporter gave a
    /// placeholder, and a TLS failure named as one; `None` when `reason` says it all.
    pub(crate) fn explain(&self, reason: &str) -> Option<String> {
        let last = self.last.lock().ok().and_then(|mut last| last.take());
        let detail = match last {
            Some(last) if !reason.contains(&last) => format!("{reason}: {last}"),
            _ => reason.to_owned(),
        };
        if is_tls_failure(&detail) {
            Some(format!(
                "the TLS handshake with {} failed, its certificate checked against {}: {detail}",
                self.endpoint, self.trust
            ))
        } else if detail != reason {
            Some(detail)
        } else {
            None
        }
    }
}

/// Whether an error's text is a TLS failure (rustls' and tonic's words for one).
pub(crate) fn is_tls_failure(text: &str) -> bool {
    let text = text.to_ascii_lowercase();
    [
        "certificate",
        "unknownissuer",
        "unknown issuer",
        "handshake",
        "alert",
        "invalidcontenttype",
        "corrupt message",
        "tls",
    ]
    .iter()
    .any(|word| text.contains(word))
}

/// An error and its sources, joined by `: ` (reqwest's own text stops at the first).
#[cfg_attr(not(feature = "otlp-http"), allow(dead_code))]
pub(crate) fn error_chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let more = cause.to_string();
        if !text.contains(&more) {
            text.push_str(": ");
            text.push_str(&more);
        }
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tls_failure_names_the_endpoint_and_what_it_was_checked_against() {
        let note = TransportNote {
            endpoint: "https://collector:4318/v1/traces".into(),
            trust: "the CA in OTEL_EXPORTER_OTLP_CERTIFICATE=/etc/ca.pem".into(),
            last: Mutex::new(None),
        };
        note.saw("error sending request: client error (Connect): invalid peer certificate: UnknownIssuer");
        let said = note.explain("HTTP export failed: network error").unwrap();
        assert!(said.contains("https://collector:4318/v1/traces"), "{said}");
        assert!(said.contains("/etc/ca.pem"), "{said}");
        assert!(said.contains("UnknownIssuer"), "{said}");
        // The next failure is told with its own transport error, not an old one.
        assert_eq!(note.explain("HTTP export failed: network error"), None);
        assert_eq!(note.explain("Connection refused"), None);
    }
}

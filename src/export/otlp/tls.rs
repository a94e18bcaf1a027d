//! TLS for OTLP: one rustls setup (ring; no OpenSSL) for both transports, from the files
//! resolved at init: the CA given, else the system's roots and the bundled web roots; this
//! client's certificate for mutual TLS.

#[cfg(feature = "otlp-http")]
use std::sync::Arc;

use crate::config::OtlpTarget;

/// Why a TLS client could not be set up from files that read well at init.
#[cfg(feature = "otlp-http")]
#[derive(Debug, thiserror::Error)]
#[error("cannot set up TLS: {0}")]
pub struct TlsSetupError(String);

/// The system's roots (none on a machine without a certificate store; an unreadable one
/// is skipped) and the bundled web roots: what an `https://` endpoint is checked against
/// when no CA is given, over either transport.
fn system_and_web_roots() -> rustls::RootCertStore {
    let mut roots = rustls::RootCertStore::empty();
    roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
    roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
    roots
}

/// tonic's TLS settings for a gRPC endpoint (`None` for plain text).
#[cfg(feature = "otlp-grpc")]
pub(crate) fn grpc(target: &OtlpTarget) -> Option<tonic::transport::ClientTlsConfig> {
    use tonic::transport::{Certificate, ClientTlsConfig, Identity};
    if !target.is_https() {
        return None;
    }
    let config = ClientTlsConfig::new();
    let config = match &target.tls.ca {
        Some(ca) => config.ca_certificate(Certificate::from_pem(&ca.pem)),
        // Not tonic's own `with_native_roots`: it refuses to build at all on a machine with
        // no system certificates (a slim container image), web roots or not.
        None => config.trust_anchors(system_and_web_roots().roots),
    };
    Some(match &target.tls.client {
        Some((cert, key)) => config.identity(Identity::from_pem(&cert.pem, &key.pem)),
        None => config,
    })
}

/// The rustls client configuration for OTLP/HTTP (every endpoint: reqwest is built with no
/// TLS provider of its own).
#[cfg(feature = "otlp-http")]
pub(crate) fn rustls_client(target: &OtlpTarget) -> Result<rustls::ClientConfig, TlsSetupError> {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer};

    let setup = |e: &dyn std::fmt::Display| TlsSetupError(e.to_string());
    let mut roots = rustls::RootCertStore::empty();
    match &target.tls.ca {
        Some(ca) => {
            for cert in CertificateDer::pem_slice_iter(&ca.pem) {
                roots
                    .add(cert.map_err(|e| setup(&e))?)
                    .map_err(|e| setup(&e))?;
            }
        }
        None if target.is_https() => roots = system_and_web_roots(),
        None => {}
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| setup(&e))?
        .with_root_certificates(roots);
    match &target.tls.client {
        Some((cert, key)) => {
            let chain = CertificateDer::pem_slice_iter(&cert.pem)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| setup(&e))?;
            let key = PrivateKeyDer::from_pem_slice(&key.pem).map_err(|e| setup(&e))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| setup(&e))
        }
        None => Ok(builder.with_no_client_auth()),
    }
}

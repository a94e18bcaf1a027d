//! The receivers' TLS (`--tls-cert`, `--tls-key`): the server certificate chain and key,
//! read and checked when the collector starts, as one rustls setting (ring) that the gRPC
//! and the HTTP receiver share. A node agent listening beyond loopback takes no plain text
//! from the network.

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::CertificateDer;

use super::CollectError;

/// The server settings for `cert` (a PEM chain, the server's certificate first) and `key`.
pub(crate) fn server_config(
    cert: &Path,
    key: &Path,
) -> Result<Arc<rustls::ServerConfig>, CollectError> {
    let bad = |flag: &'static str, path: &Path, problem: String| CollectError::Tls {
        flag,
        path: path.to_owned(),
        problem,
    };
    let read = |flag, path: &Path| {
        gpuspan::pipeline::read_pem_file(path)
            .map_err(|e| bad(flag, path, format!("cannot read the file ({e})")))
    };
    let chain = CertificateDer::pem_slice_iter(&read("--tls-cert", cert)?)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad("--tls-cert", cert, format!("not valid PEM ({e})")))?;
    if chain.is_empty() {
        return Err(bad(
            "--tls-cert",
            cert,
            "the file holds no PEM certificate (-----BEGIN CERTIFICATE-----)".into(),
        ));
    }
    let key_der = gpuspan::pipeline::private_key(&read("--tls-key", key)?)
        .map_err(|why| bad("--tls-key", key, why))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| bad("--tls-cert", cert, e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(chain, key_der)
        .map_err(|e| {
            bad(
                "--tls-key",
                key,
                format!("the key does not go with the certificate in --tls-cert ({e})"),
            )
        })?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

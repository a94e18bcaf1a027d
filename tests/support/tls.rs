//! Certificates made in the test: a CA, a server certificate it signs for `127.0.0.1` and
//! `localhost`, and a client certificate for mutual TLS, written as PEM files in a
//! temporary directory; and the rustls server settings a TLS receiver serves with.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    SanType,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

/// A CA of the test's own, with a server and a client certificate it signed.
pub struct TestPki {
    dir: tempfile::TempDir,
    /// The CA's certificate, PEM.
    pub ca_pem: String,
    /// The server's certificate and key, PEM.
    pub server_pem: String,
    pub server_key: String,
    /// The client's certificate and key, PEM.
    pub client_pem: String,
    pub client_key: String,
}

impl TestPki {
    /// A new CA named `name`, its certificates written under a temporary directory.
    pub fn new(name: &str) -> TestPki {
        let ca_key = KeyPair::generate().expect("CA key");
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(DnType::CommonName, format!("{name} test CA"));
        let ca_cert = ca_params.self_signed(&ca_key).expect("self-sign the CA");
        let issuer = Issuer::new(ca_params, ca_key);

        let server_key = KeyPair::generate().expect("server key");
        let mut server_params =
            CertificateParams::new(vec!["localhost".to_owned()]).expect("server params");
        server_params
            .subject_alt_names
            .push(SanType::IpAddress([127, 0, 0, 1].into()));
        server_params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let server_cert = server_params
            .signed_by(&server_key, &issuer)
            .expect("sign the server certificate");

        let client_key = KeyPair::generate().expect("client key");
        let mut client_params = CertificateParams::new(Vec::<String>::new()).expect("client");
        client_params
            .distinguished_name
            .push(DnType::CommonName, "gpuspan test client");
        client_params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        let client_cert = client_params
            .signed_by(&client_key, &issuer)
            .expect("sign the client certificate");

        let pki = TestPki {
            dir: tempfile::tempdir().expect("a directory for the certificates"),
            ca_pem: ca_cert.pem(),
            server_pem: server_cert.pem(),
            server_key: server_key.serialize_pem(),
            client_pem: client_cert.pem(),
            client_key: client_key.serialize_pem(),
        };
        for (file, pem) in [
            ("ca.pem", &pki.ca_pem),
            ("server.pem", &pki.server_pem),
            ("server.key", &pki.server_key),
            ("client.pem", &pki.client_pem),
            ("client.key", &pki.client_key),
        ] {
            std::fs::write(pki.dir.path().join(file), pem).expect("write a PEM file");
        }
        pki
    }

    /// The directory the PEM files are in.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// `ca.pem`: the CA's certificate.
    pub fn ca_file(&self) -> PathBuf {
        self.dir.path().join("ca.pem")
    }

    /// `server.pem` and `server.key`.
    pub fn server_files(&self) -> (PathBuf, PathBuf) {
        (
            self.dir.path().join("server.pem"),
            self.dir.path().join("server.key"),
        )
    }

    /// `client.pem` and `client.key`.
    pub fn client_files(&self) -> (PathBuf, PathBuf) {
        (
            self.dir.path().join("client.pem"),
            self.dir.path().join("client.key"),
        )
    }

    /// What a receiver serves TLS with: this server certificate, and, for mutual TLS,
    /// client certificates this CA signed required.
    pub fn server(&self, mutual: bool) -> ServerTls {
        ServerTls {
            cert_pem: self.server_pem.clone(),
            key_pem: self.server_key.clone(),
            client_ca_pem: mutual.then(|| self.ca_pem.clone()),
        }
    }
}

/// How a test receiver serves TLS.
#[derive(Clone)]
pub struct ServerTls {
    pub cert_pem: String,
    pub key_pem: String,
    /// Required client certificates' CA (mutual TLS), if any.
    pub client_ca_pem: Option<String>,
}

impl ServerTls {
    /// The rustls server configuration (ring), with the ALPN of HTTP/2 and HTTP/1.1.
    pub fn rustls(&self) -> Arc<rustls::ServerConfig> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .expect("TLS versions");
        let builder = match &self.client_ca_pem {
            Some(ca) => {
                let mut roots = rustls::RootCertStore::empty();
                for cert in CertificateDer::pem_slice_iter(ca.as_bytes()) {
                    roots.add(cert.expect("client CA PEM")).expect("client CA");
                }
                let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                    Arc::new(roots),
                    provider,
                )
                .build()
                .expect("client verifier");
                builder.with_client_cert_verifier(verifier)
            }
            None => builder.with_no_client_auth(),
        };
        let chain = CertificateDer::pem_slice_iter(self.cert_pem.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .expect("server certificate PEM");
        let key = PrivateKeyDer::from_pem_slice(self.key_pem.as_bytes()).expect("server key PEM");
        let mut config = builder
            .with_single_cert(chain, key)
            .expect("server certificate and key");
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        Arc::new(config)
    }
}

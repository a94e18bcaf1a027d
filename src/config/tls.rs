//! The TLS files of one signal's OTLP endpoint (the CA to trust, this client's certificate
//! and key), read and checked while settings resolve: a missing file, or one that holds no
//! certificate or key, stops `init` before the run starts, naming the variable (or builder
//! setter), the path and the fix, rather than failing every export later.

use std::fmt;
use std::path::{Path, PathBuf};

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

use super::layered::{layered, Env, Origin};
use super::table::{self, Signal};
use super::CodeSettings;
use crate::error::InitError;

/// One PEM file as read at init: its contents, and where it was named.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct PemFile {
    /// The variable or builder setter that named it.
    pub(crate) named_by: String,
    pub(crate) path: PathBuf,
    pub(crate) pem: Vec<u8>,
}

impl fmt::Debug for PemFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}={}", self.named_by, self.path.display())
    }
}

/// What TLS an OTLP endpoint is reached with (used for `https://` endpoints).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct TlsFiles {
    /// The CA certificates to trust instead of the system's and the bundled web roots.
    pub(crate) ca: Option<PemFile>,
    /// This client's certificate and key, for mutual TLS.
    pub(crate) client: Option<(PemFile, PemFile)>,
}

impl TlsFiles {
    /// What the server's certificate is checked against, for people.
    pub(crate) fn trust(&self) -> String {
        match &self.ca {
            Some(ca) => format!("the CA in {}={}", ca.named_by, ca.path.display()),
            None => "the system's roots and the bundled web roots (set \
                     OTEL_EXPORTER_OTLP_CERTIFICATE to the CA's PEM file for a private CA)"
                .to_owned(),
        }
    }
}

/// The TLS files for `signal`: code's, else the signal's variable, else every signal's.
pub(crate) fn tls_files(
    code: &CodeSettings,
    signal: Signal,
    env: Env<'_>,
) -> Result<TlsFiles, InitError> {
    let on = Some(signal);
    let ca = layered(&table::CERTIFICATE, code.certificate.clone(), on, env)?;
    let cert = layered(
        &table::CLIENT_CERTIFICATE,
        code.client_certificate.clone(),
        on,
        env,
    )?;
    let key = layered(&table::CLIENT_KEY, code.client_key.clone(), on, env)?;
    let ca = ca
        .map(|(path, origin)| read_certificates(&path, named(&origin), CA_FIX))
        .transpose()?;
    let client = match (cert, key) {
        (None, None) => None,
        (Some((cert, origin)), None) => {
            return Err(certificate_error(
                named(&origin),
                &cert,
                "a client certificate needs its private key too: set \
                 OTEL_EXPORTER_OTLP_CLIENT_KEY (or client_key) to the key's PEM file",
            ))
        }
        (None, Some((key, origin))) => {
            return Err(certificate_error(
                named(&origin),
                &key,
                "a client key needs its certificate too: set \
                 OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE (or client_certificate) to the \
                 certificate's PEM file",
            ))
        }
        (Some((cert, cert_origin)), Some((key, key_origin))) => Some((
            read_certificates(&cert, named(&cert_origin), CLIENT_FIX)?,
            read_key(&key, named(&key_origin))?,
        )),
    };
    Ok(TlsFiles { ca, client })
}

const CA_FIX: &str = "set it to the PEM file of the CA that signed the endpoint's \
                      certificate (-----BEGIN CERTIFICATE-----), or unset it to trust the \
                      system's roots";
const CLIENT_FIX: &str = "set it to the PEM file of this client's certificate \
                          (-----BEGIN CERTIFICATE-----)";
const KEY_FIX: &str = "set it to the PEM file of this client's private key \
                       (-----BEGIN PRIVATE KEY-----)";

fn named(origin: &Origin) -> String {
    match origin {
        Origin::Code(setter) => (*setter).to_owned(),
        Origin::Env(var) => (*var).to_owned(),
    }
}

fn certificate_error(named_by: String, path: &Path, problem: &str) -> InitError {
    InitError::TlsFile {
        name: named_by,
        path: path.to_owned(),
        problem: problem.to_owned(),
    }
}

fn read(path: &Path, named_by: &str, fix: &str) -> Result<Vec<u8>, InitError> {
    std::fs::read(path).map_err(|e| {
        certificate_error(
            named_by.to_owned(),
            path,
            &format!("cannot read the file ({e}); {fix}"),
        )
    })
}

/// The certificates of a PEM file: at least one, each well formed.
fn read_certificates(path: &Path, named_by: String, fix: &str) -> Result<PemFile, InitError> {
    let pem = read(path, &named_by, fix)?;
    let mut count = 0;
    for certificate in CertificateDer::pem_slice_iter(&pem) {
        let certificate = certificate.map_err(|e| {
            certificate_error(
                named_by.clone(),
                path,
                &format!("the file is not valid PEM ({e}); {fix}"),
            )
        })?;
        check_der(&certificate)
            .map_err(|why| certificate_error(named_by.clone(), path, &format!("{why}; {fix}")))?;
        count += 1;
    }
    if count == 0 {
        return Err(certificate_error(
            named_by,
            path,
            &format!("the file holds no PEM certificate; {fix}"),
        ));
    }
    Ok(PemFile {
        named_by,
        path: path.to_owned(),
        pem,
    })
}

/// A certificate's DER parses as X.509 (where the TLS stack is built).
#[cfg(feature = "_tls")]
fn check_der(certificate: &CertificateDer<'_>) -> Result<(), String> {
    rustls::RootCertStore::empty()
        .add(certificate.clone())
        .map_err(|e| format!("a certificate in the file does not parse ({e})"))
}

#[cfg(not(feature = "_tls"))]
fn check_der(_certificate: &CertificateDer<'_>) -> Result<(), String> {
    Ok(())
}

/// A private key in PEM (PKCS#8, PKCS#1 or SEC1).
fn read_key(path: &Path, named_by: String) -> Result<PemFile, InitError> {
    let pem = read(path, &named_by, KEY_FIX)?;
    PrivateKeyDer::from_pem_slice(&pem).map_err(|e| {
        certificate_error(
            named_by.clone(),
            path,
            &format!("the file holds no PEM private key ({e}); {KEY_FIX}"),
        )
    })?;
    Ok(PemFile {
        named_by,
        path: path.to_owned(),
        pem,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::vars::*;

    fn files(vars: &[(&str, &str)]) -> Result<TlsFiles, InitError> {
        let lookup = |name: &str| {
            vars.iter()
                .find(|(var, _)| *var == name)
                .map(|(_, value)| (*value).to_owned())
        };
        tls_files(
            &CodeSettings::default(),
            Signal::Traces,
            Env::from_fn(&lookup),
        )
    }

    fn says_all(error: InitError, words: &[&str]) {
        let text = error.to_string();
        for word in words {
            assert!(text.contains(word), "{word:?} not in: {text}");
        }
    }

    #[test]
    fn a_missing_ca_file_names_the_variable_the_path_and_the_fix() {
        let error = files(&[(OTEL_EXPORTER_OTLP_CERTIFICATE, "/nonexistent/ca.pem")]).unwrap_err();
        says_all(
            error,
            &[
                "OTEL_EXPORTER_OTLP_CERTIFICATE",
                "/nonexistent/ca.pem",
                "cannot read",
                "PEM file of the CA",
            ],
        );
    }

    #[test]
    fn a_file_that_is_not_a_certificate_is_refused_before_the_run() {
        let dir = tempfile::tempdir().unwrap();
        let notes = dir.path().join("notes.txt");
        std::fs::write(&notes, "not a certificate\n").unwrap();
        let bad_pem = dir.path().join("bad.pem");
        std::fs::write(
            &bad_pem,
            "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n",
        )
        .unwrap();
        for path in [&notes, &bad_pem] {
            let text = path.to_str().unwrap();
            // The signal's own variable is read first.
            let error = files(&[
                (OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE, text),
                (OTEL_EXPORTER_OTLP_CERTIFICATE, "/elsewhere.pem"),
            ])
            .unwrap_err();
            says_all(
                error,
                &[
                    "OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE",
                    text,
                    "BEGIN CERTIFICATE",
                ],
            );
        }
    }

    #[test]
    fn a_client_certificate_without_its_key_is_an_error_naming_the_missing_one() {
        let error = files(&[(OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE, "/x/client.pem")]).unwrap_err();
        says_all(
            error,
            &[
                "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE",
                "OTEL_EXPORTER_OTLP_CLIENT_KEY",
            ],
        );
    }

    #[test]
    fn nothing_set_is_the_system_s_roots() {
        let files = files(&[]).unwrap();
        assert_eq!(files, TlsFiles::default());
        assert!(files.trust().contains("system's roots"));
    }
}

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
        (Some((cert, cert_origin)), Some((key, key_origin))) => {
            let cert = read_certificates(&cert, named(&cert_origin), CLIENT_FIX)?;
            let key = read_key(&key, named(&key_origin))?;
            check_pair(&cert, &key).map_err(|why| {
                certificate_error(
                    key.named_by.clone(),
                    &key.path,
                    &format!(
                        "the key does not go with the certificate in {cert:?} ({why}); set it \
                         to the private key of that certificate, or both to another pair"
                    ),
                )
            })?;
            Some((cert, key))
        }
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
    read_pem_file(path).map_err(|e| {
        certificate_error(
            named_by.to_owned(),
            path,
            &format!("cannot read the file ({e}); {fix}"),
        )
    })
}

/// The most a PEM file of certificates or a key is read to: every public root together
/// is about 220 KiB, so a file past this is not one (a data set or a device named by
/// mistake), and is refused rather than read into memory whole, or forever.
pub const MOST_PEM_BYTES: u64 = 16 << 20;

/// A PEM file's bytes (a CA, a certificate chain or a key), read to [`MOST_PEM_BYTES`]:
/// a larger file, or a device that never ends, is an error saying so.
pub fn read_pem_file(path: &Path) -> std::io::Result<Vec<u8>> {
    use std::io::Read as _;
    let file = std::fs::File::open(path)?;
    if file.metadata()?.is_dir() {
        return Err(std::io::Error::other("it is a directory"));
    }
    let mut pem = Vec::new();
    file.take(MOST_PEM_BYTES + 1).read_to_end(&mut pem)?;
    if pem.len() as u64 > MOST_PEM_BYTES {
        return Err(std::io::Error::other(format!(
            "it is larger than {} MiB, which no PEM file of certificates or keys is",
            MOST_PEM_BYTES >> 20
        )));
    }
    Ok(pem)
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

/// The private key of a PEM file (PKCS#8, PKCS#1 or SEC1), or why there is none for
/// people: an encrypted key is said to be one, since nothing here can ask for its
/// passphrase, with how to decrypt it.
pub fn private_key(pem: &[u8]) -> Result<PrivateKeyDer<'static>, String> {
    PrivateKeyDer::from_pem_slice(pem).map_err(|e| {
        if pem.windows(b"ENCRYPTED".len()).any(|w| w == b"ENCRYPTED") {
            "the key is encrypted, and nothing can ask for its passphrase: decrypt it \
             (openssl pkey -in KEY -out KEY.plain) and name the decrypted file"
                .to_owned()
        } else {
            format!("the file holds no PEM private key ({e})")
        }
    })
}

/// A certificate's DER parses as X.509 (where the TLS stack is built).
#[cfg(feature = "_tls")]
fn check_der(certificate: &CertificateDer<'_>) -> Result<(), String> {
    rustls::RootCertStore::empty()
        .add(certificate.clone())
        .map_err(|e| format!("a certificate in the file does not parse ({e})"))
}

/// A client certificate's key is the one given (where the TLS stack is built): a key of
/// another certificate would fail every handshake, with words naming neither file.
#[cfg(feature = "_tls")]
fn check_pair(cert: &PemFile, key: &PemFile) -> Result<(), String> {
    let chain = CertificateDer::pem_slice_iter(&cert.pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| e.to_string())?;
    let key = private_key(&key.pem)?;
    let provider = rustls::crypto::ring::default_provider();
    rustls::sign::CertifiedKey::from_der(chain, key, &provider)
        .map(drop)
        .map_err(|e| e.to_string())
}

#[cfg(not(feature = "_tls"))]
fn check_pair(_cert: &PemFile, _key: &PemFile) -> Result<(), String> {
    Ok(())
}

#[cfg(not(feature = "_tls"))]
fn check_der(_certificate: &CertificateDer<'_>) -> Result<(), String> {
    Ok(())
}

/// A private key in PEM (PKCS#8, PKCS#1 or SEC1).
fn read_key(path: &Path, named_by: String) -> Result<PemFile, InitError> {
    let pem = read(path, &named_by, KEY_FIX)?;
    private_key(&pem)
        .map_err(|why| certificate_error(named_by.clone(), path, &format!("{why}; {KEY_FIX}")))?;
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
    fn a_ca_file_that_is_huge_a_device_a_directory_or_empty_is_refused_saying_which() {
        let dir = tempfile::tempdir().unwrap();
        let huge = dir.path().join("dataset.bin");
        // Sparse: no disk is written.
        std::fs::File::create(&huge)
            .unwrap()
            .set_len(4 * MOST_PEM_BYTES)
            .unwrap();
        let empty = dir.path().join("empty.pem");
        std::fs::write(&empty, "").unwrap();
        let cases = [
            (huge.as_path(), "larger than 16 MiB"),
            (Path::new("/dev/zero"), "larger than 16 MiB"),
            (dir.path(), "directory"),
            (empty.as_path(), "holds no PEM certificate"),
        ];
        for (path, says) in cases {
            let text = path.to_str().unwrap();
            let error = files(&[(OTEL_EXPORTER_OTLP_CERTIFICATE, text)]).unwrap_err();
            says_all(error, &["OTEL_EXPORTER_OTLP_CERTIFICATE", text, says]);
        }
    }

    #[test]
    fn an_encrypted_client_key_is_said_to_be_one_with_how_to_decrypt_it() {
        let dir = tempfile::tempdir().unwrap();
        let key = dir.path().join("client.key");
        std::fs::write(
            &key,
            "-----BEGIN ENCRYPTED PRIVATE KEY-----\nMIGbMFcGCSqGSIb3DQEFDTBKMCkGCSqGSIb3\n\
             -----END ENCRYPTED PRIVATE KEY-----\n",
        )
        .unwrap();
        let error = read_key(&key, OTEL_EXPORTER_OTLP_CLIENT_KEY.to_owned()).unwrap_err();
        says_all(
            error,
            &["OTEL_EXPORTER_OTLP_CLIENT_KEY", "encrypted", "openssl pkey"],
        );
    }

    #[test]
    fn nothing_set_is_the_system_s_roots() {
        let files = files(&[]).unwrap();
        assert_eq!(files, TlsFiles::default());
        assert!(files.trust().contains("system's roots"));
    }
}

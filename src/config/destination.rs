//! Where each signal goes: the exporter chosen, else OTLP with an endpoint, else the run
//! directory; for OTLP, the endpoint, transport, headers, timeout and compression of that
//! signal, with the TLS files it is reached with.

use std::time::Duration;

use super::layered::{layered, Env, Origin};
use super::table::{self, Signal};
use super::tls::{tls_files, TlsFiles};
use super::{parse, CodeSettings, Compression, Exporter, Protocol};
use crate::error::InitError;

/// Where one signal goes, fully resolved: the [`Exporter`] chosen, with the data it needs.
/// `crate::destinations` matches it once for everything built from it.
#[derive(Debug, Clone, PartialEq)]
pub enum Destination {
    /// OTLP, with this signal's endpoint and options.
    Otlp(OtlpTarget),
    /// OTLP/JSON lines on standard output.
    Console,
    /// Nowhere: spans still pass the taps and are counted; metric points are not read.
    None,
    /// OTLP/JSON lines in the run directory, a file for each signal.
    RunDir,
}

impl Destination {
    /// How long one export may take: the OTLP timeout, or a few seconds for local files.
    pub(crate) fn timeout(&self) -> Duration {
        match self {
            Destination::Otlp(target) => target.timeout,
            _ => Duration::from_secs(5),
        }
    }
}

/// An OTLP endpoint for one signal, with everything the exporter sends.
#[derive(Debug, Clone, PartialEq)]
pub struct OtlpTarget {
    /// Full URL: for HTTP it includes `/v1/traces` or `/v1/metrics`.
    pub(crate) endpoint: String,
    pub(crate) protocol: Protocol,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) timeout: Duration,
    pub(crate) compression: Compression,
    /// The CA and client certificate for an `https://` endpoint.
    pub(crate) tls: Box<TlsFiles>,
}

impl OtlpTarget {
    /// Whether the endpoint is reached over TLS.
    #[cfg_attr(not(feature = "_tls"), allow(dead_code))]
    pub(crate) fn is_https(&self) -> bool {
        self.endpoint.starts_with("https://")
    }
}

/// The path OTLP/HTTP appends to a base endpoint.
fn http_path(signal: Signal) -> &'static str {
    match signal {
        Signal::Traces => "/v1/traces",
        Signal::Metrics => "/v1/metrics",
    }
}

pub(crate) fn destination(
    code: &CodeSettings,
    signal: Signal,
    env: Env<'_>,
) -> Result<Destination, InitError> {
    let (row, code_exporter) = match signal {
        Signal::Traces => (&table::TRACES_EXPORTER, code.traces_exporter),
        Signal::Metrics => (&table::METRICS_EXPORTER, code.metrics_exporter),
    };
    let on = Some(signal);
    let choice = layered(row, code_exporter, on, env)?;
    let endpoint = layered(&table::ENDPOINT, code.endpoint.clone(), on, env)?;
    let exporter = match (choice, &endpoint) {
        (Some((exporter, _)), _) => exporter,
        (None, Some(_)) => Exporter::Otlp,
        (None, None) => Exporter::RunDir,
    };
    match exporter {
        Exporter::Otlp => {}
        Exporter::Console => return Ok(Destination::Console),
        Exporter::None => return Ok(Destination::None),
        Exporter::RunDir => return Ok(Destination::RunDir),
    }
    let protocol = layered(&table::PROTOCOL, code.protocol, on, env)?
        .map_or_else(table::PROTOCOL.value, |(p, _)| p);
    let own_var = table::ENDPOINT.setting.vars.precedence(on)[0];
    let insecure = super::layered::resolved_for(&table::INSECURE, code.insecure, on, env)?;
    let endpoint = match endpoint {
        Some((url, origin)) if !has_scheme(&url) => {
            Some((with_scheme(url, protocol, insecure, &origin)?, origin))
        }
        other => other,
    };
    let endpoint = match endpoint {
        // A signal's own variable is the full URL, used as is.
        Some((url, Origin::Env(var))) if var == own_var => url,
        Some((base, _)) => with_signal_path(base, protocol, http_path(signal)),
        None => {
            let base = match protocol {
                Protocol::Grpc => table::DEFAULT_GRPC_ENDPOINT,
                Protocol::HttpProtobuf => table::DEFAULT_HTTP_ENDPOINT,
            };
            with_signal_path(base.to_owned(), protocol, http_path(signal))
        }
    };
    // Headers merge by name: the environment's first, then code's over them.
    let mut headers = layered(&table::HEADERS, None, on, env)?
        .map(|(h, _)| h)
        .unwrap_or_default();
    for (key, value) in &code.headers {
        parse::check_header(key, value)
            .map_err(|error| error.named(format!("header({key:?})"), value))?;
        headers.retain(|(k, _)| !k.eq_ignore_ascii_case(key));
        headers.push((key.clone(), value.clone()));
    }
    let timeout = layered(&table::TIMEOUT, code.timeout, on, env)?
        .map_or_else(table::TIMEOUT.value, |(t, _)| t);
    let compression = layered(&table::COMPRESSION, code.compression, on, env)?
        .map_or_else(table::COMPRESSION.value, |(c, _)| c);
    Ok(Destination::Otlp(OtlpTarget {
        endpoint,
        protocol,
        headers,
        timeout,
        compression,
        tls: Box::new(tls_files(code, signal, env)?),
    }))
}

fn has_scheme(url: &str) -> bool {
    url.starts_with("http://") || url.starts_with("https://")
}

/// A `host:port` endpoint given without a scheme: gRPC's is TLS unless `insecure` says plain
/// text (the OpenTelemetry specification's `OTEL_EXPORTER_OTLP_INSECURE`); HTTP's needs one.
fn with_scheme(
    url: String,
    protocol: Protocol,
    insecure: bool,
    origin: &Origin,
) -> Result<String, InitError> {
    match protocol {
        Protocol::Grpc if insecure => Ok(format!("http://{url}")),
        Protocol::Grpc => Ok(format!("https://{url}")),
        Protocol::HttpProtobuf => {
            let name = match origin {
                Origin::Code(setter) => *setter,
                Origin::Env(var) => var,
            };
            Err(InitError::InvalidSetting {
                name: name.to_owned(),
                value: url,
                expected: "a URL with http:// or https:// for http/protobuf (only a gRPC \
                           endpoint may be host:port, with OTEL_EXPORTER_OTLP_INSECURE saying \
                           whether it is plain text)"
                    .to_owned(),
            })
        }
    }
}

/// OTLP/HTTP appends the signal's path to a base endpoint; gRPC takes it as is.
fn with_signal_path(base: String, protocol: Protocol, path: &str) -> String {
    match protocol {
        Protocol::Grpc => base,
        Protocol::HttpProtobuf => format!("{}{path}", base.trim_end_matches('/')),
    }
}

//! The named choices of the settings: where a signal goes, the OTLP transport and its
//! compression. Each parses and prints one set of spellings, the same for the environment,
//! the command line and the Python keywords.

use std::fmt;
use std::str::FromStr;

use super::error::InvalidValue;

/// Where a signal goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Exporter {
    /// OTLP to a collector (`otlp`).
    Otlp,
    /// OTLP/JSON lines on standard output (`console`).
    Console,
    /// Nowhere (`none`).
    None,
    /// The run directory (`run_dir`, `gpuspan-runs/<run-id>/`): the default when no
    /// endpoint is set.
    RunDir,
}

impl Exporter {
    /// Every exporter, in the order [`EXPORTERS`] names them.
    pub(crate) const ALL: [Exporter; 4] = [
        Exporter::Otlp,
        Exporter::Console,
        Exporter::None,
        Exporter::RunDir,
    ];

    /// The spelling the environment, the command line and Python take.
    pub fn as_str(self) -> &'static str {
        match self {
            Exporter::Otlp => "otlp",
            Exporter::Console => "console",
            Exporter::None => "none",
            Exporter::RunDir => "run_dir",
        }
    }
}

/// OTLP transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Protocol {
    /// OTLP over gRPC (`grpc`), port 4317 by convention.
    Grpc,
    /// OTLP over HTTP with protobuf bodies (`http/protobuf`), port 4318 by convention.
    HttpProtobuf,
}

/// OTLP request compression.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Compression {
    /// gzip (`gzip`).
    Gzip,
    /// None (`none`): the default.
    None,
}

/// What [`Exporter`] parses; the first three are the OpenTelemetry names.
pub(crate) const EXPORTERS: &str = "otlp, console or none, or run_dir for the run directory";
/// What [`Protocol`] parses.
pub(crate) const PROTOCOLS: &str = "grpc or http/protobuf (http for short)";
/// What [`Compression`] parses.
pub(crate) const COMPRESSIONS: &str = "gzip or none";

impl Protocol {
    /// The spelling the environment, the command line and Python take.
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::Grpc => "grpc",
            Protocol::HttpProtobuf => "http/protobuf",
        }
    }
}

impl Compression {
    /// The spelling the environment and Python take.
    pub fn as_str(self) -> &'static str {
        match self {
            Compression::Gzip => "gzip",
            Compression::None => "none",
        }
    }
}

/// `otlp`, `console`, `none` or `run_dir` (surrounding blanks ignored).
impl FromStr for Exporter {
    type Err = InvalidValue;

    fn from_str(text: &str) -> Result<Self, InvalidValue> {
        Exporter::ALL
            .into_iter()
            .find(|e| e.as_str() == text.trim())
            .ok_or_else(|| InvalidValue::new(text, EXPORTERS))
    }
}

/// `grpc` or `http/protobuf` (`http` for short; surrounding blanks ignored); `http/json`
/// is refused by name.
impl FromStr for Protocol {
    type Err = InvalidValue;

    fn from_str(text: &str) -> Result<Self, InvalidValue> {
        match text.trim() {
            "grpc" => Ok(Protocol::Grpc),
            "http/protobuf" | "http" => Ok(Protocol::HttpProtobuf),
            "http/json" => Err(InvalidValue::new(
                text,
                "grpc or http/protobuf (http/json is not supported)",
            )),
            _ => Err(InvalidValue::new(text, PROTOCOLS)),
        }
    }
}

/// `gzip` or `none`, in any case (surrounding blanks ignored).
impl FromStr for Compression {
    type Err = InvalidValue;

    fn from_str(text: &str) -> Result<Self, InvalidValue> {
        match text.trim().to_ascii_lowercase().as_str() {
            "gzip" => Ok(Compression::Gzip),
            "none" => Ok(Compression::None),
            _ => Err(InvalidValue::new(text, COMPRESSIONS)),
        }
    }
}

macro_rules! display_as_str {
    ($($kind:ty),*) => {$(
        impl fmt::Display for $kind {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }
    )*};
}
display_as_str!(Exporter, Protocol, Compression);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_choice_reads_back_what_it_prints() {
        for exporter in Exporter::ALL {
            assert_eq!(exporter.to_string().parse(), Ok(exporter));
        }
        for protocol in [Protocol::Grpc, Protocol::HttpProtobuf] {
            assert_eq!(protocol.to_string().parse(), Ok(protocol));
        }
        for compression in [Compression::Gzip, Compression::None] {
            assert_eq!(compression.to_string().parse(), Ok(compression));
        }
    }

    #[test]
    fn a_wrong_spelling_says_the_accepted_ones() {
        assert_eq!(" http ".parse(), Ok(Protocol::HttpProtobuf));
        let error = "https".parse::<Protocol>().unwrap_err().to_string();
        assert!(
            error.contains("\"https\"") && error.contains(PROTOCOLS),
            "{error}"
        );
        let error = "file".parse::<Exporter>().unwrap_err().to_string();
        for exporter in Exporter::ALL {
            assert!(error.contains(exporter.as_str()), "{exporter}: {error}");
        }
    }
}

//! The grammars of setting values, one parser each. Every parser takes the text of a
//! variable or of a value given in code, returns what would be accepted as its error (the
//! resolver adds the variable's name), and never panics on any input.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use super::error::InvalidValue;
use super::{Compression, Exporter, Protocol};

/// The longest duration any setting takes: a day. Past that a value is a typo.
const MAX_DURATION: Duration = Duration::from_secs(86_400);

/// What [`duration`] takes.
pub(crate) const DURATION: &str = "a duration such as 5ms, 500us or 1s";
/// What [`millis`] takes.
pub(crate) const MILLIS: &str = "a whole number of milliseconds, such as 10000";
/// What [`boolean`] takes.
pub(crate) const BOOLEAN: &str = "true or false (also on or off, yes or no, 1 or 0)";
/// What [`byte_size`] takes.
pub(crate) const BYTE_SIZE: &str = "bytes with a unit, such as 20GiB or 512MB";
/// What [`fraction`] takes.
pub(crate) const FRACTION: &str = "a fraction of the device above 0 and at most 100%, such as 95%";
/// What [`count`] takes.
pub(crate) const COUNT: &str = "a whole number above 0, such as 65536";
/// What [`whole`] takes.
pub(crate) const WHOLE: &str = "a whole number, such as 1";
/// What [`url`] takes.
pub(crate) const URL: &str =
    "a URL such as http://localhost:4317 (gRPC) or http://localhost:4318 (HTTP)";
/// What [`listen_addr`] takes.
pub(crate) const LISTEN_ADDR: &str = "a port (9464) or an address with a port (127.0.0.1:9464)";
/// What [`key_values`] and [`headers`] take.
pub(crate) const KEY_VALUES: &str = "key1=value1,key2=value2 (values %-encoded)";
/// What [`text`] and [`path`] take.
pub(crate) const TEXT: &str = "any text";

/// `5ms`, `500us`, `1s`, `0.5s`, `2m`; a bare number is milliseconds.
pub fn duration(text: &str) -> Result<Duration, InvalidValue> {
    let wrong = || InvalidValue::new(text, DURATION);
    let trimmed = text.trim();
    let split = trimmed
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(trimmed.len());
    let (number, unit) = trimmed.split_at(split);
    let number: f64 = number.parse().map_err(|_| wrong())?;
    let seconds = match unit.trim() {
        "" | "ms" => number / 1e3,
        "us" | "µs" => number / 1e6,
        "ns" => number / 1e9,
        "s" => number,
        "m" | "min" => number * 60.0,
        _ => return Err(wrong()),
    };
    if !seconds.is_finite() || seconds < 0.0 {
        return Err(wrong());
    }
    if seconds > MAX_DURATION.as_secs_f64() {
        return Err(InvalidValue::new(
            text,
            format!("{DURATION}, at most a day"),
        ));
    }
    Duration::try_from_secs_f64(seconds).map_err(|_| wrong())
}

/// A whole number of milliseconds (the OpenTelemetry convention for timeouts and intervals).
pub(crate) fn millis(text: &str) -> Result<Duration, InvalidValue> {
    let ms: u64 = text
        .trim()
        .parse()
        .map_err(|_| InvalidValue::new(text, MILLIS))?;
    let duration = Duration::from_millis(ms);
    if duration > MAX_DURATION {
        return Err(InvalidValue::new(
            text,
            format!("{MILLIS}, at most a day (86400000)"),
        ));
    }
    Ok(duration)
}

/// `true`/`false`, `on`/`off`, `yes`/`no`, `1`/`0`, in any case.
pub fn boolean(text: &str) -> Result<bool, InvalidValue> {
    match text.trim().to_ascii_lowercase().as_str() {
        "true" | "on" | "yes" | "1" => Ok(true),
        "false" | "off" | "no" | "0" => Ok(false),
        _ => Err(InvalidValue::new(text, BOOLEAN)),
    }
}

/// A signed whole number (ranks, sizes).
pub(crate) fn integer(text: &str) -> Result<i64, InvalidValue> {
    text.trim()
        .parse()
        .map_err(|_| InvalidValue::new(text, "a whole number"))
}

/// A whole number, zero included.
pub(crate) fn whole(text: &str) -> Result<usize, InvalidValue> {
    text.trim()
        .parse()
        .map_err(|_| InvalidValue::new(text, WHOLE))
}

/// A positive count.
pub(crate) fn count(text: &str) -> Result<usize, InvalidValue> {
    match text.trim().parse::<usize>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(InvalidValue::new(text, COUNT)),
    }
}

/// A number of bytes with a unit: `20GiB`, `20 GB`, `512MiB`, `1.5kib`, `1024B`, above zero.
pub(crate) fn byte_size(text: &str) -> Result<u64, InvalidValue> {
    let wrong = || InvalidValue::new(text, BYTE_SIZE);
    let trimmed = text.trim();
    let split = trimmed
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .ok_or_else(wrong)?;
    let (number, unit) = trimmed.split_at(split);
    let number: f64 = number.parse().map_err(|_| wrong())?;
    let scale: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "b" => 1.0,
        "kb" => 1e3,
        "mb" => 1e6,
        "gb" => 1e9,
        "tb" => 1e12,
        "kib" => 1024.0,
        "mib" => 1024.0 * 1024.0,
        "gib" => 1024.0 * 1024.0 * 1024.0,
        "tib" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        _ => return Err(wrong()),
    };
    let bytes = number * scale;
    if !bytes.is_finite() || bytes < 1.0 || bytes > u64::MAX as f64 {
        return Err(InvalidValue::new(
            text,
            "a budget above zero bytes, such as 20GiB",
        ));
    }
    Ok(bytes.round() as u64)
}

/// A fraction of a device: `95%` or `0.95`, above 0 and at most 100 %.
pub fn fraction(text: &str) -> Result<f64, InvalidValue> {
    let trimmed = text.trim();
    let value = match trimmed.strip_suffix('%') {
        Some(percent) => percent.trim().parse::<f64>().map(|p| p / 100.0),
        None => trimmed.parse::<f64>(),
    };
    let value = value
        .map_err(|_| InvalidValue::new(text, "a fraction of the device, such as 95% or 0.95"))?;
    check_fraction(value).map_err(|expected| InvalidValue::new(text, expected))
}

/// Bounds of [`fraction`], for values given in code too.
pub(crate) fn check_fraction(value: f64) -> Result<f64, &'static str> {
    if value.is_finite() && value > 0.0 && value <= 1.0 {
        Ok(value)
    } else {
        Err(FRACTION)
    }
}

/// `otlp`, `console`, `none` or `run_dir`.
pub(crate) fn exporter(text: &str) -> Result<Exporter, InvalidValue> {
    text.parse()
}

/// `grpc` or `http/protobuf`.
pub(crate) fn protocol(text: &str) -> Result<Protocol, InvalidValue> {
    text.parse()
}

/// `gzip` or `none`.
pub(crate) fn compression(text: &str) -> Result<Compression, InvalidValue> {
    text.parse()
}

/// Any text, as given.
pub(crate) fn text(text: &str) -> Result<String, InvalidValue> {
    Ok(text.to_owned())
}

/// `host:port` with a numeric port and nothing else.
fn host_port(text: &str) -> bool {
    match text.rsplit_once(':') {
        Some((host, port)) => {
            !host.is_empty()
                && !host.contains(['/', ' '])
                && !port.is_empty()
                && port.bytes().all(|b| b.is_ascii_digit())
        }
        None => false,
    }
}

/// A file or directory path, as given.
pub(crate) fn path(text: &str) -> Result<PathBuf, InvalidValue> {
    Ok(PathBuf::from(text))
}

/// An `http://` or `https://` URL with a host, or a `host:port` (a gRPC endpoint without a
/// scheme, whose TLS `OTEL_EXPORTER_OTLP_INSECURE` decides).
pub(crate) fn url(text: &str) -> Result<String, InvalidValue> {
    let trimmed = text.trim();
    let rest = trimmed
        .strip_prefix("http://")
        .or_else(|| trimmed.strip_prefix("https://"))
        .or_else(|| host_port(trimmed).then_some(trimmed));
    match rest {
        Some(rest) if !rest.is_empty() && !rest.starts_with('/') => Ok(trimmed.to_owned()),
        _ => Err(InvalidValue::new(text, URL)),
    }
}

/// A port (`9464`, `:9464`, loopback then) or an address with a port.
pub fn listen_addr(text: &str) -> Result<SocketAddr, InvalidValue> {
    let trimmed = text.trim();
    let with_host = if trimmed.starts_with(':') {
        format!("127.0.0.1{trimmed}")
    } else if !trimmed.is_empty() && trimmed.chars().all(|c| c.is_ascii_digit()) {
        format!("127.0.0.1:{trimmed}")
    } else {
        trimmed.to_owned()
    };
    with_host
        .parse()
        .map_err(|_| InvalidValue::new(text, LISTEN_ADDR))
}

/// The W3C-baggage-like lists of `OTEL_RESOURCE_ATTRIBUTES` and `*_HEADERS`: `key=value`
/// pairs separated by commas, values percent-encoded.
pub(crate) fn key_values(text: &str) -> Result<Vec<(String, String)>, InvalidValue> {
    let mut pairs = Vec::new();
    for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let Some((key, value)) = item.split_once('=') else {
            return Err(InvalidValue::new(
                text,
                format!("'{item}' is not key=value; expected key1=value1,key2=value2"),
            ));
        };
        let key = key.trim();
        if key.is_empty() {
            return Err(InvalidValue::new(
                text,
                format!("'{item}' has an empty key"),
            ));
        }
        let value = percent_decode(value.trim()).ok_or_else(|| {
            InvalidValue::new(text, format!("'{item}' has a broken %-escape in its value"))
        })?;
        pairs.push((key.to_owned(), value));
    }
    Ok(pairs)
}

/// Header lists: as [`key_values`], and each name and value must be sendable as HTTP/2
/// metadata (visible ASCII names, no control characters in values).
pub(crate) fn headers(text: &str) -> Result<Vec<(String, String)>, InvalidValue> {
    let pairs = key_values(text)?;
    for (key, value) in &pairs {
        check_header(key, value).map_err(|e| InvalidValue::new(text, e.expected().to_owned()))?;
    }
    Ok(pairs)
}

/// Checks one header for HTTP and gRPC; the error (on the header's value) says what is
/// wrong with it.
pub(crate) fn check_header(key: &str, value: &str) -> Result<(), InvalidValue> {
    let name_ok = key
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
    if key.is_empty() || !name_ok {
        return Err(InvalidValue::new(
            value,
            format!("'{key}' is not a header name (letters, digits, '-', '_' and '.')"),
        ));
    }
    if value.bytes().any(|b| b < 0x20 && b != b'\t' || b == 0x7f) || !value.is_ascii() {
        return Err(InvalidValue::new(
            value,
            format!("the value of header '{key}' has characters a header cannot carry"),
        ));
    }
    Ok(())
}

fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes.get(i + 1..i + 3)?;
            let hex = std::str::from_utf8(hex).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_take_units() {
        assert_eq!(duration("5ms"), Ok(Duration::from_millis(5)));
        assert_eq!(duration("500us"), Ok(Duration::from_micros(500)));
        assert_eq!(duration("0.5s"), Ok(Duration::from_millis(500)));
        assert_eq!(duration("7"), Ok(Duration::from_millis(7)));
        assert_eq!(duration("2m"), Ok(Duration::from_secs(120)));
        assert!(duration("5 parsecs").is_err());
        assert!(duration("").is_err());
    }

    #[test]
    fn huge_durations_are_errors_not_panics() {
        for text in [
            "99999999999999999999s",
            "1e308s",
            "inf",
            "NaN",
            "18446744073709551616ms",
            "1000000000000000000000000000000000000000m",
        ] {
            let error = duration(text).expect_err(text);
            assert!(error.contains("duration"), "{text}: {error}");
        }
        assert!(millis("99999999999999999999").is_err());
        assert!(millis("18446744073709551615").is_err());
    }

    #[test]
    fn headers_must_be_sendable() {
        assert_eq!(
            headers("x-team=ml,authorization=Bearer%20abc").unwrap(),
            vec![
                ("x-team".to_owned(), "ml".to_owned()),
                ("authorization".to_owned(), "Bearer abc".to_owned())
            ]
        );
        assert!(headers("bad name=1").unwrap_err().contains("header name"));
        assert!(headers("x=a%0Ab").unwrap_err().contains("cannot carry"));
        assert!(headers("x=%E2%82").unwrap_err().contains("%-escape"));
        assert!(key_values("%").is_err());
        assert!(key_values("a=%").is_err());
        assert!(key_values("a=%é").is_err());
    }

    /// A small deterministic generator, so the test needs no extra crate and runs the same
    /// inputs every time.
    struct Lcg(u64);
    impl Lcg {
        fn next(&mut self) -> u64 {
            self.0 = self
                .0
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            self.0 >> 33
        }
        fn text(&mut self) -> String {
            const ALPHABET: &[&str] = &[
                "0",
                "1",
                "9",
                ".",
                "e",
                "-",
                "+",
                "%",
                "=",
                ",",
                " ",
                "ms",
                "us",
                "s",
                "m",
                "ns",
                "µs",
                "inf",
                "NaN",
                "http://",
                "https://",
                ":",
                "/",
                "x",
                "é",
                "\n",
                "\u{0}",
                "9999999999",
                "%4",
                "%zz",
                "127.0.0.1",
                "[::1]",
                "grpc",
                "gzip",
            ];
            let len = self.next() % 12;
            (0..len)
                .map(|_| ALPHABET[(self.next() % ALPHABET.len() as u64) as usize])
                .collect()
        }
    }

    #[test]
    fn arbitrary_text_gives_an_answer_never_a_panic() {
        let mut random = Lcg(0x5eed);
        for _ in 0..200_000 {
            let text = random.text();
            let _ = duration(&text);
            let _ = millis(&text);
            let _ = boolean(&text);
            let _ = integer(&text);
            let _ = count(&text);
            let _ = exporter(&text);
            let _ = protocol(&text);
            let _ = compression(&text);
            let _ = url(&text);
            let _ = listen_addr(&text);
            let _ = headers(&text);
            let _ = key_values(&text);
            let _ = crate::diagnose::settings::parse_budget(&text);
            let _ = crate::diagnose::settings::parse_ratio(&text);
            let _ = crate::diagnose::settings::parse_fraction(&text);
        }
    }
}

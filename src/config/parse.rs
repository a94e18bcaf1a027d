//! Parsers for setting values. Each returns what would be accepted as its error, so the
//! resolver can name the variable, the value and the fix; none panics on any input.

use std::net::SocketAddr;
use std::time::Duration;

use super::{Compression, Exporter, Protocol};

/// The longest duration any setting takes: a day. Past that a value is a typo.
const MAX_DURATION: Duration = Duration::from_secs(86_400);

/// `5ms`, `500us`, `1s`, `0.5s`, `2m`; a bare number is milliseconds.
pub(crate) fn duration(text: &str) -> Result<Duration, String> {
    const EXPECTED: &str = "a duration such as 5ms, 500us or 1s";
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let number: f64 = number.parse().map_err(|_| EXPECTED.to_owned())?;
    let seconds = match unit.trim() {
        "" | "ms" => number / 1e3,
        "us" | "µs" => number / 1e6,
        "ns" => number / 1e9,
        "s" => number,
        "m" | "min" => number * 60.0,
        _ => return Err(EXPECTED.to_owned()),
    };
    if !seconds.is_finite() || seconds < 0.0 {
        return Err(EXPECTED.to_owned());
    }
    if seconds > MAX_DURATION.as_secs_f64() {
        return Err(format!("{EXPECTED}, at most a day"));
    }
    Duration::try_from_secs_f64(seconds).map_err(|_| EXPECTED.to_owned())
}

/// A whole number of milliseconds (the OpenTelemetry convention for timeouts and intervals).
pub(crate) fn millis(text: &str) -> Result<Duration, String> {
    const EXPECTED: &str = "a whole number of milliseconds, such as 10000";
    let ms: u64 = text.trim().parse().map_err(|_| EXPECTED.to_owned())?;
    let duration = Duration::from_millis(ms);
    if duration > MAX_DURATION {
        return Err(format!("{EXPECTED}, at most a day (86400000)"));
    }
    Ok(duration)
}

/// `true`/`false` (also `1`/`0`).
pub(crate) fn boolean(text: &str) -> Result<bool, String> {
    match text.trim().to_ascii_lowercase().as_str() {
        "true" | "1" => Ok(true),
        "false" | "0" => Ok(false),
        _ => Err("true or false".to_owned()),
    }
}

/// A signed whole number (ranks, sizes).
pub(crate) fn integer(text: &str) -> Result<i64, String> {
    text.trim().parse().map_err(|_| "a whole number".to_owned())
}

/// A positive count.
pub(crate) fn count(text: &str) -> Result<usize, String> {
    match text.trim().parse::<usize>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err("a whole number above 0, such as 65536".to_owned()),
    }
}

/// `otlp`, `console` or `none`.
pub(crate) fn exporter(text: &str) -> Result<Exporter, String> {
    match text.trim() {
        "otlp" => Ok(Exporter::Otlp),
        "console" => Ok(Exporter::Console),
        "none" => Ok(Exporter::None),
        _ => Err("otlp, console or none".to_owned()),
    }
}

/// `grpc` or `http/protobuf`.
pub(crate) fn protocol(text: &str) -> Result<Protocol, String> {
    match text.trim() {
        "grpc" => Ok(Protocol::Grpc),
        "http/protobuf" => Ok(Protocol::HttpProtobuf),
        "http/json" => Err("grpc or http/protobuf (http/json is not supported)".to_owned()),
        _ => Err("grpc or http/protobuf".to_owned()),
    }
}

/// `gzip` or `none`.
pub(crate) fn compression(text: &str) -> Result<Compression, String> {
    match text.trim().to_ascii_lowercase().as_str() {
        "gzip" => Ok(Compression::Gzip),
        "none" => Ok(Compression::None),
        _ => Err("gzip or none".to_owned()),
    }
}

/// An `http://` or `https://` URL with a host.
pub(crate) fn url(text: &str) -> Result<String, String> {
    let text = text.trim();
    let rest = text
        .strip_prefix("http://")
        .or_else(|| text.strip_prefix("https://"));
    match rest {
        Some(rest) if !rest.is_empty() && !rest.starts_with('/') => Ok(text.to_owned()),
        _ => Err(
            "a URL such as http://localhost:4317 (gRPC) or http://localhost:4318 (HTTP)".to_owned(),
        ),
    }
}

/// A port (`9464`, `:9464`, loopback then) or an address with a port.
pub(crate) fn listen_addr(text: &str) -> Result<SocketAddr, String> {
    let text = text.trim();
    let with_host = if text.starts_with(':') {
        format!("127.0.0.1{text}")
    } else if !text.is_empty() && text.chars().all(|c| c.is_ascii_digit()) {
        format!("127.0.0.1:{text}")
    } else {
        text.to_owned()
    };
    with_host
        .parse()
        .map_err(|_| "a port (9464) or an address with a port (127.0.0.1:9464)".to_owned())
}

/// The W3C-baggage-like lists of `OTEL_RESOURCE_ATTRIBUTES` and `*_HEADERS`: `key=value`
/// pairs separated by commas, values percent-encoded.
pub(crate) fn key_values(text: &str) -> Result<Vec<(String, String)>, String> {
    let mut pairs = Vec::new();
    for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let Some((key, value)) = item.split_once('=') else {
            return Err(format!(
                "'{item}' is not key=value; expected key1=value1,key2=value2"
            ));
        };
        let key = key.trim();
        if key.is_empty() {
            return Err(format!("'{item}' has an empty key"));
        }
        let value = percent_decode(value.trim())
            .ok_or_else(|| format!("'{item}' has a broken %-escape in its value"))?;
        pairs.push((key.to_owned(), value));
    }
    Ok(pairs)
}

/// Header lists: as [`key_values`], and each name and value must be sendable as HTTP/2
/// metadata (visible ASCII names, no control characters in values).
pub(crate) fn headers(text: &str) -> Result<Vec<(String, String)>, String> {
    let pairs = key_values(text)?;
    for (key, value) in &pairs {
        check_header(key, value)?;
    }
    Ok(pairs)
}

/// Checks one header for HTTP and gRPC.
pub(crate) fn check_header(key: &str, value: &str) -> Result<(), String> {
    let name_ok = key
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
    if key.is_empty() || !name_ok {
        return Err(format!(
            "'{key}' is not a header name (letters, digits, '-', '_' and '.')"
        ));
    }
    if value.bytes().any(|b| b < 0x20 && b != b'\t' || b == 0x7f) || !value.is_ascii() {
        return Err(format!(
            "the value of header '{key}' has characters a header cannot carry"
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

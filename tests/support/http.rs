//! A minimal blocking HTTP/1.1 client for talking to the servers the tests start (MLflow's
//! and Prometheus's REST APIs) on loopback: one request per connection, `Content-Length` or
//! chunked responses.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// A response: status code and body.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub body: String,
}

impl Response {
    /// The body as JSON; panics with the body when it is not.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("response is not JSON ({e}): {}", self.body))
    }
}

/// `GET path` (path and query, already encoded).
pub fn get(addr: SocketAddr, path: &str) -> std::io::Result<Response> {
    request(addr, "GET", path, None)
}

/// `POST path` with a JSON body.
pub fn post_json(
    addr: SocketAddr,
    path: &str,
    body: &serde_json::Value,
) -> std::io::Result<Response> {
    request(addr, "POST", path, Some(&body.to_string()))
}

fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    json: Option<&str>,
) -> std::io::Result<Response> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    stream.set_read_timeout(Some(Duration::from_secs(30)))?;
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    if let Some(body) = json {
        head.push_str(&format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n",
            body.len()
        ));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes())?;
    if let Some(body) = json {
        stream.write_all(body.as_bytes())?;
    }
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw)?;
    parse(&raw).ok_or_else(|| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!(
                "not an HTTP response: {}",
                String::from_utf8_lossy(&raw[..raw.len().min(300)])
            ),
        )
    })
}

fn parse(raw: &[u8]) -> Option<Response> {
    let end = raw.windows(4).position(|w| w == b"\r\n\r\n")?;
    let head = std::str::from_utf8(&raw[..end]).ok()?;
    let mut body = &raw[end + 4..];
    let status = head.split(' ').nth(1)?.parse().ok()?;
    let header = |name: &str| {
        head.lines().skip(1).find_map(|line| {
            let (key, value) = line.split_once(':')?;
            key.trim()
                .eq_ignore_ascii_case(name)
                .then(|| value.trim().to_ascii_lowercase())
        })
    };
    let mut decoded = Vec::new();
    if header("transfer-encoding").is_some_and(|v| v.contains("chunked")) {
        loop {
            let line_end = body.windows(2).position(|w| w == b"\r\n")?;
            let size_text = std::str::from_utf8(&body[..line_end]).ok()?;
            let size = usize::from_str_radix(size_text.split(';').next()?.trim(), 16).ok()?;
            body = &body[line_end + 2..];
            if size == 0 {
                break;
            }
            decoded.extend_from_slice(body.get(..size)?);
            body = body.get(size + 2..)?;
        }
    } else if let Some(length) = header("content-length").and_then(|v| v.parse::<usize>().ok()) {
        decoded.extend_from_slice(body.get(..length)?);
    } else {
        decoded.extend_from_slice(body);
    }
    Some(Response {
        status,
        body: String::from_utf8_lossy(&decoded).into_owned(),
    })
}

/// Percent-encodes a query parameter value.
pub fn encode(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

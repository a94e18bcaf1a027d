//! A client that sends half a request and stays, one that sends garbage, and one that sends
//! too much do not delay another client's scrape of the Prometheus endpoint; the garbage
//! gets a 4xx, and the stalled client is cut off.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use gpuspan::Telemetry;

use gpuspan::settings::Exporter;
use gpuspan_test_support as support;
use support::scripted::scripted;

const MB: u64 = 1 << 20;

/// The most a scrape may take while another client stalls: far under the seconds a server
/// that reads one client at a time waits for the stalled one.
const PROMPT: Duration = Duration::from_millis(500);

/// Sends `request` and reads the answer until the server closes the connection.
fn exchange(addr: SocketAddr, request: &[u8]) -> String {
    let mut stream = TcpStream::connect(addr).expect("connect to the endpoint");
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    stream.write_all(request).expect("send the request");
    let mut response = Vec::new();
    // A reset after the answer (the server closing with unread input) still leaves the answer.
    let _ = stream.read_to_end(&mut response);
    String::from_utf8_lossy(&response).into_owned()
}

fn scrape(addr: SocketAddr) -> String {
    exchange(
        addr,
        format!("GET /metrics HTTP/1.1\r\nHost: {addr}\r\n\r\n").as_bytes(),
    )
}

/// The value of the `metric` line of device `uuid`.
fn gauge(text: &str, metric: &str, uuid: &str) -> f64 {
    text.lines()
        .find(|l| l.starts_with(metric) && l.contains(&format!("hw_id=\"{uuid}\"")))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {metric} line for {uuid} in\n{text}"))
}

#[test]
fn a_scrape_answers_promptly_while_other_clients_misbehave() {
    let (source, script) = scripted(2, 300 * MB);
    script.set(1, 700 * MB);
    let builder = Telemetry::builder()
        .memory_source(source)
        .sample_interval(Duration::from_millis(2))
        .traces_exporter(Exporter::None)
        .metrics_exporter(Exporter::None)
        .summary(false)
        .prometheus_addr("127.0.0.1:0".parse().unwrap());
    let (telemetry, ()) = support::setup::run(builder, |_| script.wait_reads(3));
    let addr = telemetry.prometheus_addr().expect("the endpoint is up");

    // Half a request: no blank line ends the headers, and the client stays.
    let mut stalled = TcpStream::connect(addr).unwrap();
    stalled
        .write_all(format!("GET /metrics HTTP/1.1\r\nHost: {addr}\r\n").as_bytes())
        .unwrap();
    // Let the server take the stalled connection first.
    std::thread::sleep(Duration::from_millis(100));

    let started = Instant::now();
    let response = scrape(addr);
    let took = started.elapsed();
    assert!(
        response.starts_with("HTTP/1.1 200 OK"),
        "the scrape failed:\n{response}"
    );
    assert!(
        took < PROMPT,
        "the scrape took {took:?} while another client had sent half a request"
    );
    for (uuid, used) in [("GPU-scripted-0", 300 * MB), ("GPU-scripted-1", 700 * MB)] {
        assert_eq!(
            gauge(&response, "hw_gpu_memory_usage_bytes", uuid),
            used as f64
        );
        assert_eq!(
            gauge(&response, "hw_gpu_memory_limit_bytes", uuid),
            (80u64 << 30) as f64
        );
    }

    // Garbage instead of a request line is a client error, answered at once.
    let started = Instant::now();
    let garbage = exchange(addr, b"\x16\x03\x01 hello there\r\n\r\n");
    assert!(
        garbage.starts_with("HTTP/1.1 400"),
        "a malformed request got:\n{garbage}"
    );
    assert!(started.elapsed() < PROMPT, "{:?}", started.elapsed());

    // Headers larger than the server keeps are refused at once, not buffered. The refusal
    // may be lost to the reset that closing with unread input sends; the close is not.
    let huge = format!(
        "GET /metrics HTTP/1.1\r\nHost: {addr}\r\nX-Filler: {}\r\n\r\n",
        "a".repeat(64 * 1024)
    );
    let started = Instant::now();
    let refused = exchange(addr, huge.as_bytes());
    assert!(
        refused.starts_with("HTTP/1.1 431") || refused.is_empty(),
        "an oversized request got:\n{refused}"
    );
    assert!(started.elapsed() < PROMPT, "{:?}", started.elapsed());

    // A body on a scrape is refused unread.
    let with_body = exchange(
        addr,
        format!("GET /metrics HTTP/1.1\r\nHost: {addr}\r\nContent-Length: 1000000\r\n\r\nxyz")
            .as_bytes(),
    );
    assert!(
        with_body.starts_with("HTTP/1.1 413"),
        "a scrape with a large body got:\n{with_body}"
    );

    // Still prompt after all that, and the stalled client is cut off without an answer
    // once its time to send the headers is up.
    let started = Instant::now();
    assert!(scrape(addr).starts_with("HTTP/1.1 200 OK"));
    assert!(started.elapsed() < PROMPT, "{:?}", started.elapsed());
    stalled
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut rest = Vec::new();
    let closed = Instant::now();
    let _ = stalled.read_to_end(&mut rest);
    assert!(
        closed.elapsed() < Duration::from_secs(10),
        "the stalled connection stayed open for {:?}",
        closed.elapsed()
    );

    telemetry.shutdown().unwrap();
}

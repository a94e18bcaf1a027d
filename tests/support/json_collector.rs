//! `gpuspan collect` taking OTLP/JSON over HTTP alone (`--grpc off`), as a child process:
//! one span sent to it, then stopped with SIGTERM, and the span as its run directory wrote
//! it.

use std::io::{BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::collector_process::read_banner;
use crate::otlp_json::{one_span, send, unix_nanos};
use crate::raw_http::Reply;
use crate::receiver::unused_port;

/// What the collector did with the span.
pub struct OneSpan {
    /// Its answer to the request.
    pub reply: Reply,
    /// All it printed after its banner, its summary included.
    pub summary: String,
    /// Its run directory.
    pub run: PathBuf,
    /// The span as the run's `traces.jsonl` holds it.
    pub span: Value,
}

/// Starts `binary collect --grpc off --http ADDR` in `dir`, its runs under `dir/runs` and
/// no forward target, with what `configure` adds (the GPUs it reads); sends it a span
/// `generate` of 50 ms that has just ended, stops it with SIGTERM, and checks it started
/// on `ADDR` and ended with exit code 0.
pub fn collect_one_span(binary: &str, dir: &Path, configure: impl FnOnce(&mut Command)) -> OneSpan {
    let port = unused_port();
    let mut command = Command::new(binary);
    command
        .args(["collect", "--grpc", "off", "--http"])
        .arg(format!("127.0.0.1:{port}"))
        .current_dir(dir)
        .env("GPUSPAN_RUN_DIR", dir.join("runs"))
        .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
        .stderr(Stdio::piped());
    configure(&mut command);
    let mut collector = command.spawn().expect("start gpuspan collect");
    let mut stderr = BufReader::new(collector.stderr.take().expect("piped stderr"));
    let banner = read_banner(&mut stderr).unwrap_or_else(|before| {
        let _ = collector.kill();
        panic!("gpuspan collect did not start: {before}")
    });
    assert!(
        banner.contains(&format!("HTTP on 127.0.0.1:{port}")),
        "{banner}"
    );

    let now = unix_nanos();
    std::thread::sleep(Duration::from_millis(60));
    let reply = send(
        ([127, 0, 0, 1], port).into(),
        &one_span("generate", now, now + 50_000_000),
    );

    // SAFETY: signalling our own child process.
    assert_eq!(
        unsafe { libc::kill(collector.id() as libc::pid_t, libc::SIGTERM) },
        0
    );
    let status = collector.wait().expect("wait for gpuspan collect");
    let mut summary = String::new();
    stderr
        .read_to_string(&mut summary)
        .expect("gpuspan collect's stderr");
    assert!(status.success(), "{status}: {summary}");

    let run = std::fs::read_dir(dir.join("runs"))
        .expect("the runs directory")
        .next()
        .expect("a run directory")
        .expect("a run directory")
        .path();
    let traces = std::fs::read_to_string(run.join("traces.jsonl")).expect("traces.jsonl");
    let request: Value =
        serde_json::from_str(traces.lines().next().expect("a request")).expect("OTLP/JSON");
    let span = request["resourceSpans"][0]["scopeSpans"][0]["spans"][0].clone();
    OneSpan {
        reply,
        summary,
        run,
        span,
    }
}

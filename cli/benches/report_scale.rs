//! The report of a 24-hour run of 8 devices sampled every 5 ms: how big the timeline file
//! and the page are, how long `gpuspan report --html/--svg/--png` takes, and (when the
//! picture tests' Chromium is installed) how long the page takes to draw in a browser.
//!
//! The run is synthetic: steps of one second whose memory rises, peaks and falls on every
//! device (four changes per step), a 20 ms spike every ten minutes, host memory moving
//! every second, one epoch an hour. `cargo bench -p gpuspan-cli --bench report_scale`; `cargo test
//! --benches` takes a one-hour pass only.

#[path = "../../benches/common/mod.rs"]
mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use gpuspan::runlog::{TimelineDevice, TimelineEncoder, TIMELINE_FILE};
use gpuspan_cli::report::Run;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, KeyValue};
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};

const DEVICES: usize = 8;
const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;
const ORIGIN: u64 = 1_800_000_000_000_000_000;

fn int(key: &str, value: i64) -> KeyValue {
    KeyValue {
        key: key.into(),
        value: Some(AnyValue {
            value: Some(any_value::Value::IntValue(value)),
        }),
        ..KeyValue::default()
    }
}

fn span(name: &str, index: (&str, i64), start: u64, end: u64, memory: [u64; 3], id: u64) -> Span {
    Span {
        trace_id: vec![1; 16],
        span_id: id.to_be_bytes().to_vec(),
        name: name.into(),
        start_time_unix_nano: start,
        end_time_unix_nano: end,
        attributes: vec![
            int(index.0, index.1),
            int("gpu.memory.start", memory[0] as i64),
            int("gpu.memory.peak", memory[1] as i64),
            int("gpu.memory.end", memory[2] as i64),
        ],
        ..Span::default()
    }
}

/// Device memory of device `d` at second `s`, phase `p` (0..4) of the step.
fn used(d: usize, s: u64, p: u64) -> u64 {
    let base = 40 * GIB + d as u64 * GIB;
    base + [0, 6 * GIB, 9 * GIB + (s % 23) * 64 * MIB, 2 * GIB][p as usize]
}

/// Writes a synthetic run of `hours` into `dir`.
fn write_run(dir: &Path, hours: u64) {
    let devices: Vec<TimelineDevice> = (0..DEVICES as u32)
        .map(|index| TimelineDevice {
            id: gpuspan::source::GpuId::gpu(index),
            uuid: format!("GPU-{index}"),
            name: "NVIDIA H200".into(),
        })
        .collect();
    let mut timeline = TimelineEncoder::new(ORIGIN, 5_000_000, &devices);
    let mut values = vec![None; 2 * DEVICES + 4];
    let seconds = hours * 3600;
    let mut steps = Vec::new();
    let mut epochs = Vec::new();
    for s in 0..seconds {
        let t = ORIGIN + s * 1_000_000_000;
        // Changes at 0, 100, 400 and 800 ms, on the 5 ms grid with some jitter.
        for (p, at) in [0u64, 100, 400, 800].into_iter().enumerate() {
            for d in 0..DEVICES {
                values[d] = Some(used(d, s, p as u64));
                values[DEVICES + d] = Some(141 * GIB);
            }
            values[2 * DEVICES + 1] = Some(30 * GIB + (s % 97) * 4096);
            timeline.push(t + at * 1_000_000 + (s * 7 + p as u64) % 5 * 1000, &values);
            if p == 2 && s % 600 == 300 {
                // A 20 ms spike on device s % 8.
                let d = (s / 600) as usize % DEVICES;
                values[d] = Some(138 * GIB);
                timeline.push(t + (at + 50) * 1_000_000, &values);
                values[d] = Some(used(d, s, 2));
                timeline.push(t + (at + 70) * 1_000_000, &values);
            }
        }
        let peak: u64 = (0..DEVICES).map(|d| used(d, s, 2)).sum::<u64>()
            + if s % 600 == 300 {
                138 * GIB - used((s / 600) as usize % DEVICES, s, 2)
            } else {
                0
            };
        let start: u64 = (0..DEVICES).map(|d| used(d, s, 0)).sum();
        let end: u64 = (0..DEVICES).map(|d| used(d, s, 3)).sum();
        steps.push(span(
            "step",
            ("ml.step", s as i64),
            t,
            t + 990_000_000,
            [start, peak, end],
            s + 1,
        ));
        if s % 3600 == 3599 {
            let e = s / 3600;
            epochs.push(span(
                "epoch",
                ("ml.epoch", e as i64),
                ORIGIN + e * 3_600_000_000_000,
                t + 1_000_000_000,
                [start, 140 * GIB, end],
                1 << 40 | e,
            ));
        }
    }
    std::fs::write(dir.join(TIMELINE_FILE), timeline.bytes()).unwrap();
    let mut lines = String::new();
    for chunk in steps.chunks(512).chain(std::iter::once(epochs.as_slice())) {
        let request = ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans {
                scope_spans: vec![ScopeSpans {
                    spans: chunk.to_vec(),
                    ..ScopeSpans::default()
                }],
                ..ResourceSpans::default()
            }],
        };
        lines.push_str(&serde_json::to_string(&request).unwrap());
        lines.push('\n');
    }
    std::fs::write(dir.join("traces.jsonl"), lines).unwrap();
}

fn timed<T>(f: impl FnOnce() -> T) -> (T, Duration) {
    let started = Instant::now();
    let value = f();
    (value, started.elapsed())
}

fn mb(bytes: usize) -> String {
    format!("{:.2} MB", bytes as f64 / 1e6)
}

fn main() {
    let hours = if common::full_run() { 24 } else { 1 };
    let dir = tempfile::tempdir().unwrap();
    let ((), write) = timed(|| write_run(dir.path(), hours));
    let timeline = std::fs::metadata(dir.path().join(TIMELINE_FILE))
        .unwrap()
        .len() as usize;
    let (run, read) = timed(|| Run::read(dir.path()).unwrap());
    let (html, html_time) = timed(|| gpuspan_cli::report::html(&run));
    let (svg, svg_time) = timed(|| gpuspan_cli::report::svg(&run, 1400));
    let (png, png_time) = timed(|| gpuspan_cli::report::png(&run, 1400).unwrap());
    let page = dir.path().join("report.html");
    std::fs::write(&page, &html).unwrap();

    println!(
        "report_scale: {hours} h, {DEVICES} devices at 5 ms, {} steps",
        run.spans.len()
    );
    println!("  synthetic run written          {write:.2?}");
    println!(
        "  timeline.bin                   {} ({} per device-hour)",
        mb(timeline),
        mb(timeline / DEVICES / hours as usize)
    );
    println!("  read run (timeline + spans)    {read:.2?}");
    println!(
        "  html                           {} in {html_time:.2?} (+ read)",
        mb(html.len())
    );
    println!(
        "  svg, 1400 px                   {} in {svg_time:.2?} (+ read)",
        mb(svg.len())
    );
    println!(
        "  png, 1400 px                   {} in {png_time:.2?} (+ read)",
        mb(png.len())
    );

    // The page in Chromium, when the picture tests' tools are installed.
    let tools = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/pictures/node_modules");
    if tools.is_dir() && Path::new("/usr/bin/chromium").exists() {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/pictures/render_time.js");
        let output = std::process::Command::new("node")
            .arg(script)
            .arg(&page)
            .env("NODE_PATH", &tools)
            .output()
            .unwrap();
        println!(
            "  page in headless Chromium      {}",
            String::from_utf8_lossy(&output.stdout).trim()
        );
    } else {
        println!(
            "  page in headless Chromium      (not installed: bash tests/pictures/install.sh)"
        );
    }
    assert!(html.len() < 10_000_000, "the page is over 10 MB");
}

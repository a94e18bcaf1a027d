//! The collector's timeline and enrichment: a day of 8 devices at 5 ms (fill rate and
//! memory), window queries at every age, and spans enriched per second.
//!
//! `cargo bench -p gpuspan-cli --features __bench --bench collect_enrich`; prints one line per figure.
//! Run without `--bench` (`cargo test -p gpuspan-cli --benches --features __bench`), it does a short smoke
//! pass over ten minutes instead of a day.

use std::time::{Duration, Instant};

use gpuspan_cli::collect::__BenchTimeline as Timeline;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span};

const MS: u64 = 1_000_000;

fn xorshift(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

fn main() {
    let devices = 8;
    let timeline = Timeline::new(devices, Duration::from_millis(5));
    let t0 = 1_700_000_000_000 * MS;
    let full = std::env::args().any(|a| a == "--bench");
    let day = if full { 86_400_000 * MS } else { 600_000 * MS };
    let ticks = day / (5 * MS);
    let mut x = 1u64;
    let mut used = vec![None; devices as usize];
    let filling = Instant::now();
    for i in 0..ticks {
        let spike = xorshift(&mut x) % 1000 == 0;
        for (d, slot) in used.iter_mut().enumerate() {
            *slot = Some(((40 + d as u64) << 30) + if spike { 8 << 30 } else { (i % 64) << 20 });
        }
        timeline.push(t0 + i * 5 * MS, &used);
    }
    let fill = filling.elapsed();
    println!(
        "fill: {ticks} ticks of {devices} devices ({} min at 5 ms) in {:.1} s, {:.2} us per tick",
        day / 60_000 / MS,
        fill.as_secs_f64(),
        fill.as_secs_f64() * 1e6 / ticks as f64
    );
    println!(
        "memory: {:.1} MiB after {} min (bound 64 MiB)",
        timeline.heap_bytes() as f64 / 1048576.0,
        day / 60_000 / MS
    );

    let now = t0 + day;
    let cases = [
        ("1 s window ending now", 1_000 * MS, 0),
        ("1 min window 5 min ago", 60_000 * MS, 300_000 * MS),
        ("10 min window 1 h ago", 600_000 * MS, 3_600_000 * MS),
        ("1 h window 12 h ago", 3_600_000 * MS, 43_200_000 * MS),
        ("6 h window 17 h ago", 21_600_000 * MS, 61_200_000 * MS),
    ];
    for (name, width, age) in cases {
        if width + age + 1000 * MS > day {
            continue;
        }
        let rounds = if full { 200_000u64 } else { 2_000 };
        let started = Instant::now();
        let mut sink = 0u64;
        for r in 0..rounds {
            let end = now - age - (r % 1000) * MS;
            sink = sink.wrapping_add(timeline.peak(end - width, end).unwrap_or(0));
        }
        let per = started.elapsed().as_secs_f64() * 1e6 / rounds as f64;
        println!("query: {name}: {per:.2} us ({sink})");
    }

    for devices in [1u32, 8] {
        let (wall, cpu, spans) = enrich_rate(devices, if full { 100 } else { 5 }, &mut x);
        println!(
            "enrich: {spans} spans (200 ms windows in the last 10 min, {devices} device(s)): \
             {:.0} spans/s of wall time, {:.0} spans per CPU second ({:.2} us of CPU each)",
            spans as f64 / wall,
            spans as f64 / cpu,
            cpu * 1e6 / spans as f64
        );
    }
}

/// CPU time of this thread, in seconds (the machine may be shared, so wall time overstates
/// the cost).
fn thread_cpu() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid timespec out-pointer for the calling thread's clock.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as f64 + ts.tv_nsec as f64 / 1e9
}

/// Enriches `requests` requests of 1,000 spans against 10 minutes of `devices` at 5 ms; returns
/// wall seconds, CPU seconds and spans enriched.
fn enrich_rate(devices: u32, requests: usize, x: &mut u64) -> (f64, f64, u64) {
    let timeline = Timeline::new(devices, Duration::from_millis(5));
    let now = 1_700_000_000_000 * MS;
    let ticks = 600_000 / 5;
    let mut used = vec![None; devices as usize];
    for i in 0..ticks {
        for (d, slot) in used.iter_mut().enumerate() {
            *slot = Some(((40 + d as u64) << 30) + ((xorshift(x) % 64) << 20));
        }
        timeline.push(now - (ticks - i) * 5 * MS, &used);
    }
    let mut requests: Vec<ExportTraceServiceRequest> = (0..requests)
        .map(|_| ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans {
                scope_spans: vec![ScopeSpans {
                    spans: (0..1_000)
                        .map(|_| {
                            let start = now - 600_000 * MS + xorshift(x) % (590_000 * MS);
                            Span {
                                trace_id: vec![1; 16],
                                span_id: vec![2; 8],
                                name: "step".into(),
                                start_time_unix_nano: start,
                                end_time_unix_nano: start + 200 * MS,
                                ..Default::default()
                            }
                        })
                        .collect(),
                    ..Default::default()
                }],
                ..Default::default()
            }],
        })
        .collect();
    let (wall, cpu) = (Instant::now(), thread_cpu());
    let mut enriched = 0;
    for request in &mut requests {
        enriched += timeline.enrich(request);
    }
    (wall.elapsed().as_secs_f64(), thread_cpu() - cpu, enriched)
}

//! `gpuspan diff` on two runs of 100,000 steps each (100 epochs of 1,000 steps), written as
//! gpuspan's run directory writes them: OTLP/JSON requests of 512 spans a line, each step
//! with the attributes a step carries on one device (memory start, peak, end and delta,
//! samples, source, host memory, the code location, `ml.step` and `batch_size`), about
//! 1.3 KB a span and 140 MB a side. The new run peaks 1 MiB higher at every step.
//!
//! - `read and compare`: `Diff::compare` from the two directories, both read at once, as
//!   the command does;
//! - `render`: the table and the JSON of the outcome.
//!
//! `cargo bench -p gpuspan-cli --bench diff_runs`
//!
//! With `GPUSPAN_BENCH_DIFF_DIR=DIR`, the two runs are written to `DIR/base` and `DIR/new`
//! (unless already there) and kept, so that the command itself can be timed on them as a
//! whole process: `/usr/bin/time -v gpuspan diff DIR/base DIR/new --json`.

use std::io::Write as _;
use std::path::Path;

use criterion::{criterion_group, criterion_main, Criterion};
use gpuspan_cli::diff::{Diff, MaxIncrease};
use serde_json::{json, Value};

const EPOCHS: i64 = 100;
const STEPS: i64 = 1_000;
const GIB: i64 = 1 << 30;
const MIB: i64 = 1 << 20;
const ORIGIN: u64 = 1_800_000_000_000_000_000;

fn int(key: &str, value: i64) -> Value {
    json!({ "key": key, "value": { "intValue": value.to_string() } })
}

fn text(key: &str, value: &str) -> Value {
    json!({ "key": key, "value": { "stringValue": value } })
}

fn span(name: &str, id: u64, parent: Option<u64>, start: u64, attributes: Vec<Value>) -> Value {
    json!({
        "traceId": format!("{:032x}", 0xabcd_u64),
        "spanId": format!("{id:016x}"),
        "traceState": "",
        "parentSpanId": parent.map(|p| format!("{p:016x}")).unwrap_or_default(),
        "flags": 257,
        "name": name,
        "kind": 1,
        "startTimeUnixNano": start.to_string(),
        "endTimeUnixNano": (start + 90_000_000).to_string(),
        "attributes": attributes,
        "droppedAttributesCount": 0,
        "events": [],
        "droppedEventsCount": 0,
        "links": [],
        "droppedLinksCount": 0,
        "status": { "message": "", "code": 0 },
    })
}

fn memory(start: i64, peak: i64, end: i64) -> Vec<Value> {
    vec![
        int("gpu.memory.start", start),
        int("gpu.memory.end", end),
        int("gpu.memory.peak", peak),
        int("gpu.memory.delta", end - start),
        int("process.memory.start", 900 * MIB),
        int("process.memory.end", 900 * MIB),
        int("process.memory.peak", 910 * MIB),
        int("gpu.memory.samples", 18),
        text("gpu.memory.source", "nvml"),
    ]
}

/// Writes a run of `EPOCHS × STEPS` steps whose step peaks are `extra` above the base.
fn write_run(dir: &Path, extra: i64) {
    std::fs::create_dir_all(dir).unwrap();
    let file = std::fs::File::create(dir.join("traces.jsonl")).unwrap();
    let mut out = std::io::BufWriter::new(file);
    let resource = json!({ "attributes": [
        text("host.name", "node-1"), int("process.pid", 4242), text("ml.run.id", "bench"),
        text("service.name", "train"),
    ] });
    let mut batch = Vec::with_capacity(512);
    let flush = |batch: &mut Vec<Value>, out: &mut std::io::BufWriter<std::fs::File>| {
        let line = json!({ "resourceSpans": [{ "resource": resource, "scopeSpans": [{
            "scope": { "name": "gpuspan", "version": "" }, "spans": batch }] }] });
        serde_json::to_writer(&mut *out, &line).unwrap();
        out.write_all(b"\n").unwrap();
        batch.clear();
    };
    let mut id = 0;
    for epoch in 0..EPOCHS {
        id += 1;
        let epoch_id = id;
        for step in 0..STEPS {
            id += 1;
            let start = ORIGIN + ((epoch * STEPS + step) as u64) * 100_000_000;
            let mut attributes = vec![
                text("code.file.path", "examples/train.rs"),
                text("code.module.name", "train"),
                int("code.line.number", 237),
                text("target", "train"),
                int("ml.step", step),
                int("batch_size", 256),
            ];
            attributes.extend(memory(
                20 * GIB,
                30 * GIB + (step % 7) * MIB + extra,
                20 * GIB,
            ));
            batch.push(span("step", id, Some(epoch_id), start, attributes));
            if batch.len() == 512 {
                flush(&mut batch, &mut out);
            }
        }
        let start = ORIGIN + ((epoch * STEPS) as u64) * 100_000_000;
        let mut attributes = vec![int("ml.epoch", epoch)];
        attributes.extend(memory(20 * GIB, 30 * GIB + 6 * MIB + extra, 20 * GIB));
        batch.push(span("epoch", epoch_id, None, start, attributes));
    }
    flush(&mut batch, &mut out);
    out.flush().unwrap();
}

fn diff_runs(c: &mut Criterion) {
    let temporary = tempfile::tempdir().unwrap();
    let kept = std::env::var_os("GPUSPAN_BENCH_DIFF_DIR").map(std::path::PathBuf::from);
    let root = kept.as_deref().unwrap_or(temporary.path());
    let (base, new) = (root.join("base"), root.join("new"));
    for (dir, extra) in [(&base, 0), (&new, MIB)] {
        if kept.is_none() || !dir.join("traces.jsonl").is_file() {
            write_run(dir, extra);
        }
    }
    let size = std::fs::metadata(base.join("traces.jsonl")).unwrap().len();
    eprintln!(
        "diff_runs: {} steps a side, {:.0} MB a side",
        EPOCHS * STEPS,
        size as f64 / 1e6
    );

    let limits: MaxIncrease = "1%".parse().unwrap();
    let diff = Diff::compare(&base, &new, limits.clone()).unwrap();
    assert!(diff.passed);
    assert_eq!(diff.rows[0].compared, (EPOCHS * STEPS) as usize);

    let mut group = c.benchmark_group("gpuspan diff, 100,000 steps a side");
    group.sample_size(10);
    group.bench_function("read and compare", |b| {
        b.iter(|| Diff::compare(&base, &new, limits.clone()).unwrap())
    });
    group.bench_function("render the table and the JSON", |b| {
        b.iter(|| (diff.table(), diff.to_json()))
    });
    group.finish();
}

criterion_group!(benches, diff_runs);
criterion_main!(benches);

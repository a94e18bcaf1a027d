//! Traces files written by hand, as gpuspan writes a run's `traces.jsonl` and the
//! OpenTelemetry Collector's file exporter writes its output: one OTLP/JSON export request
//! a line. For tests that read runs back (`gpuspan diff`, `gpuspan report`) with figures
//! chosen to the byte; and the spans of such a file read back.

use std::path::Path;

use serde_json::{json, Value};

/// Mebibytes, in bytes.
pub const MIB: i64 = 1 << 20;
/// Gibibytes, in bytes.
pub const GIB: i64 = 1 << 30;

/// The spans of one run (one resource), built in the order they end.
#[derive(Debug, Clone, Default)]
pub struct Trace {
    resource: Vec<Value>,
    spans: Vec<Value>,
    next_id: u64,
    clock: u64,
}

/// The figures of a span: memory at the start, the peak, and the end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mem {
    pub start: i64,
    pub peak: i64,
    pub end: i64,
}

/// Memory that holds `bytes` throughout.
pub const fn flat(bytes: i64) -> Mem {
    Mem {
        start: bytes,
        peak: bytes,
        end: bytes,
    }
}

impl Trace {
    /// A run of no rank.
    pub fn new() -> Self {
        Self::default()
    }

    /// A run whose resource says `ml.rank`.
    pub fn rank(rank: i64) -> Self {
        Self {
            resource: vec![json!({ "key": "ml.rank", "value": { "intValue": rank.to_string() } })],
            ..Self::default()
        }
    }

    /// A span id, 8 bytes in hex, of the next span.
    pub fn reserve_id(&mut self) -> String {
        self.next_id += 1;
        format!("{:016x}", self.next_id)
    }

    /// Adds a span with id `id` (from [`reserve_id`](Self::reserve_id)) under `parent`,
    /// with `gpu.memory.*` from `mem` and the other integer attributes in `ints`. Its trace
    /// id is the epoch's (or 1), its times follow the span before.
    pub fn span(
        &mut self,
        name: &str,
        id: &str,
        parent: Option<&str>,
        mem: Option<Mem>,
        ints: &[(&str, i64)],
    ) {
        let mut attributes: Vec<Value> = ints
            .iter()
            .map(|(k, v)| json!({ "key": k, "value": { "intValue": v.to_string() } }))
            .collect();
        if let Some(m) = mem {
            for (key, value) in [
                ("gpu.memory.start", m.start),
                ("gpu.memory.peak", m.peak),
                ("gpu.memory.end", m.end),
                ("gpu.memory.delta", m.end - m.start),
            ] {
                attributes.push(json!({ "key": key, "value": { "intValue": value.to_string() } }));
            }
            attributes
                .push(json!({ "key": "gpu.memory.source", "value": { "stringValue": "nvml" } }));
        }
        let epoch = ints
            .iter()
            .find(|(k, _)| *k == "ml.epoch")
            .map_or(0, |(_, e)| *e);
        self.clock += 1_000_000;
        self.spans.push(json!({
            "traceId": format!("{:032x}", 0xd1ff_0000_u64 + epoch as u64),
            "spanId": id,
            "parentSpanId": parent.unwrap_or(""),
            "name": name,
            "kind": 1,
            "startTimeUnixNano": (1_796_000_000_000_000_000u64 + self.clock).to_string(),
            "endTimeUnixNano": (1_796_000_000_000_000_000u64 + self.clock + 500_000).to_string(),
            "attributes": attributes,
            "status": {},
        }));
    }

    /// An epoch of steps, each `(ml.step, memory)`, each step with a `forward` phase whose
    /// memory `forward` gives from the step's.
    pub fn epoch(
        &mut self,
        epoch: i64,
        steps: &[(i64, Mem)],
        forward: impl Fn(i64, Mem) -> Option<Mem>,
    ) {
        let epoch_id = self.reserve_id();
        for &(step, mem) in steps {
            let step_id = self.reserve_id();
            if let Some(f) = forward(step, mem) {
                let id = self.reserve_id();
                self.span("forward", &id, Some(&step_id), Some(f), &[]);
            }
            self.span(
                "step",
                &step_id,
                Some(&epoch_id),
                Some(mem),
                &[("ml.step", step)],
            );
        }
        let peak = steps.iter().map(|(_, m)| m.peak).max().unwrap_or(0);
        let mem = Mem {
            start: steps.first().map_or(0, |(_, m)| m.start),
            peak,
            end: steps.last().map_or(0, |(_, m)| m.end),
        };
        self.span("epoch", &epoch_id, None, Some(mem), &[("ml.epoch", epoch)]);
    }

    /// The file's lines: one export request per span, as the run directory writes them in
    /// batches of one.
    pub fn lines(&self) -> Vec<String> {
        self.spans
            .iter()
            .map(|span| {
                json!({
                    "resourceSpans": [{
                        "resource": { "attributes": self.resource },
                        "scopeSpans": [{ "scope": { "name": "gpuspan" }, "spans": [span] }],
                    }],
                })
                .to_string()
            })
            .collect()
    }

    /// Writes `dir/traces.jsonl`, making `dir`.
    pub fn write_run(&self, dir: &Path) {
        std::fs::create_dir_all(dir).unwrap();
        write_lines(&dir.join("traces.jsonl"), &self.lines());
    }
}

/// Writes lines to a file, each ended by a newline.
pub fn write_lines(path: &Path, lines: &[String]) {
    let mut text = lines.join("\n");
    text.push('\n');
    std::fs::write(path, text).unwrap();
}

/// The spans of an OTLP/JSON lines file, in file order; none when there is no such file.
pub fn read_spans(path: &Path) -> Vec<Value> {
    let Ok(text) = std::fs::read_to_string(path) else {
        return Vec::new();
    };
    let mut spans = Vec::new();
    for line in text.lines() {
        let request: Value = serde_json::from_str(line).unwrap();
        for rs in request["resourceSpans"].as_array().unwrap() {
            for ss in rs["scopeSpans"].as_array().unwrap() {
                spans.extend(ss["spans"].as_array().unwrap().iter().cloned());
            }
        }
    }
    spans
}

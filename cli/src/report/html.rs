//! The self-contained HTML page: one file, no network, a canvas and a few kilobytes of
//! script.
//!
//! Memory is embedded as one min/max envelope per device over at most [`BUCKET_BUDGET`]
//! buckets in all (each bucket the lowest and highest value at any instant inside it,
//! computed from the full-resolution timeline, quantized outward to 16 bits). The page
//! builds coarser levels from it (a min/max pyramid) and at every zoom recomputes each
//! pixel's envelope from the finest level whose buckets are no wider than a pixel, so a
//! spike shows at any zoom. A run with few enough samples also embeds them as they are, and
//! zoomed in closer than a bucket the page draws those. Steps carry their exact start, end
//! and peak.

use std::fmt::Write as _;

use base64::Engine as _;
use serde_json::json;

use super::envelope::envelope;
use super::run::Run;
use gpuspan::runlog::energy::{joules, watts};
use gpuspan::runlog::Role;

/// Buckets embedded over all devices: 2 MiB of envelope, whatever the run's length.
pub(crate) const BUCKET_BUDGET: usize = 1 << 19;
/// Samples embedded as they are (all lanes together) when a run has no more than this: the
/// page then draws them exactly when zoomed in closer than a bucket.
pub(crate) const POINT_BUDGET: usize = 1 << 17;
/// Steps embedded with their figures; a longer run keeps the steps with the highest peaks.
pub(crate) const STEP_BUDGET: usize = 120_000;

/// Bytes of one step's figures on the page: start, end, peak and index as f64, energy and
/// power as f32 (a page of the most steps stays under 10 MB).
const STEP_BYTES: usize = 4 * 8 + 2 * 4;

const SCRIPT: &str = include_str!("page.js");
const STYLE: &str = include_str!("page.css");

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// The page for `run`.
pub fn html(run: &Run) -> String {
    let data = page_data(run).to_string().replace("</", "<\\/");
    let title = escape(&run_name(run));
    let mut page = String::with_capacity(data.len() + 16 * 1024);
    let _ = write!(
        page,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>gpuspan · {title}</title><style>{STYLE}</style></head><body>\
         <header><h1>gpuspan · {title}</h1><p class=\"hint\">Wheel to zoom, drag to zoom \
         into a range, double-click to see the whole run. Hover a step for its memory.</p>\
         <button id=\"reset\">Whole run</button></header>\
         <div id=\"chart\"><canvas id=\"canvas\"></canvas><div id=\"tip\" hidden></div></div>\
         <section>{tables}</section>\
         <script type=\"application/json\" id=\"data\">{data}</script>\
         <script>{SCRIPT}</script></body></html>\n",
        tables = tables(run),
    );
    page
}

fn run_name(run: &Run) -> String {
    run.dir.file_name().map_or_else(
        || run.dir.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    )
}

pub(crate) fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// Everything the script draws, as JSON; times in ms from `t0`.
fn page_data(run: &Run) -> serde_json::Value {
    let (start, end) = run.extent();
    let ms = |t: u64| (t as f64 - start as f64) / 1e6;
    let duration_ns = (end - start) as f64;

    let mut lanes = Vec::new();
    if let Some(timeline) = &run.timeline {
        let figures = super::lanes(timeline);
        let interval = timeline.interval_nanos.max(1) as f64;
        let cap = BUCKET_BUDGET / figures.len().max(1);
        let buckets = ((duration_ns / interval).ceil() as usize + 1).clamp(1, cap);
        let width = (duration_ns / (buckets - 1).max(1) as f64).max(1.0);
        let points: usize = figures.iter().map(|l| l.series.points.len()).sum();
        // Samples and steps share 4 MiB (before base64), so the page stays under 10 MB.
        let steps = run
            .spans
            .iter()
            .filter(|s| matches!(s.role, Role::Step(_)))
            .count()
            .min(STEP_BUDGET);
        let exact = points <= POINT_BUDGET && points * 16 + steps * STEP_BYTES <= 4 << 20;
        for lane in figures {
            let env = envelope(&lane.series.points, start, width, buckets);
            let top = env.iter().flatten().map(|b| b.1).max().unwrap_or(0);
            // 65534 steps up to the highest value; 65535 marks "not read".
            let scale = (top.max(1) as f64 / 65534.0).ceil().max(1.0);
            let mut bytes = Vec::with_capacity(env.len() * 4);
            for bucket in &env {
                let (lo, hi) = match bucket {
                    Some((lo, hi)) => (
                        (*lo as f64 / scale).floor() as u16,
                        (*hi as f64 / scale).ceil().min(65534.0) as u16,
                    ),
                    None => (u16::MAX, u16::MAX),
                };
                bytes.extend_from_slice(&lo.to_le_bytes());
                bytes.extend_from_slice(&hi.to_le_bytes());
            }
            // Exact samples: (ms, bytes) pairs, NaN while not read.
            let samples = exact.then(|| {
                let mut bytes = Vec::with_capacity(lane.series.points.len() * 16);
                for (t, v) in &lane.series.points {
                    bytes.extend_from_slice(&ms(*t).to_le_bytes());
                    bytes.extend_from_slice(&v.map_or(f64::NAN, |v| v as f64).to_le_bytes());
                }
                b64(&bytes)
            });
            lanes.push(json!({
                "samples": samples,
                "label": lane.label,
                "total": lane.total,
                "top": top,
                "scale": scale,
                "width": width / 1e6,
                "n": env.len(),
                "data": b64(&bytes),
            }));
        }
    }

    let mut steps: Vec<_> = run
        .spans
        .iter()
        .filter_map(|s| match s.role {
            Role::Step(i) => Some((s, i)),
            _ => None,
        })
        .collect();
    let all_steps = steps.len();
    if steps.len() > STEP_BUDGET {
        steps.sort_by_key(|(s, _)| std::cmp::Reverse(s.gpu.map_or(i64::MIN, |m| m.peak)));
        steps.truncate(STEP_BUDGET);
    }
    steps.sort_by_key(|(s, _)| s.start_unix_nanos);
    let mut columns = Vec::with_capacity(steps.len() * 32);
    for f in 0..4 {
        for (s, i) in &steps {
            let value = match f {
                0 => ms(s.start_unix_nanos),
                1 => ms(s.end_unix_nanos),
                2 => s.gpu.map_or(f64::NAN, |m| m.peak as f64),
                _ => *i as f64,
            };
            columns.extend_from_slice(&value.to_le_bytes());
        }
    }
    // Energy then power, NaN where a step has none; an estimated energy is negative (the
    // page writes it with a ~). Only when some step has a figure.
    let energy = steps
        .iter()
        .any(|(s, _)| s.energy.joules.is_some())
        .then(|| {
            let mut bytes = Vec::with_capacity(steps.len() * 8);
            for (s, _) in &steps {
                let joules = s.energy.joules.map_or(f32::NAN, |j| {
                    (if s.energy.estimated { -j } else { j }) as f32
                });
                bytes.extend_from_slice(&joules.to_le_bytes());
            }
            for (s, _) in &steps {
                let watts = s.energy.power_watts.map_or(f32::NAN, |w| w as f32);
                bytes.extend_from_slice(&watts.to_le_bytes());
            }
            b64(&bytes)
        });
    let throttled: Vec<usize> = steps
        .iter()
        .enumerate()
        .filter(|(_, (s, _))| s.energy.throttled)
        .map(|(position, _)| position)
        .collect();

    let epochs: Vec<_> = run
        .spans
        .iter()
        .filter_map(|s| match s.role {
            Role::Epoch(e) => Some(json!({
                "epoch": e,
                "start": ms(s.start_unix_nanos),
                "end": ms(s.end_unix_nanos),
                "memory": s.gpu.map(|m| [m.start, m.peak, m.end]),
                "energy": s.energy.joules,
                "power": s.energy.power_watts,
            })),
            _ => None,
        })
        .collect();
    let markers: Vec<_> = run
        .markers
        .iter()
        .map(|m| {
            json!({
                "name": m.name,
                "t": ms(m.unix_nanos),
                "span": m.span,
                "attributes": m.attributes,
            })
        })
        .collect();
    json!({
        "t0": start as f64 / 1e6,
        "duration": duration_ns / 1e6,
        "lanes": lanes,
        "steps": {
            "n": steps.len(),
            "all": all_steps,
            "data": b64(&columns),
            "energy": energy,
            "throttled": throttled,
        },
        "epochs": epochs,
        "markers": markers,
    })
}

fn mib(bytes: i64) -> String {
    crate::util::mib(bytes as f64, 1)
}

/// The epoch table and the batch-size fit, as HTML.
fn tables(run: &Run) -> String {
    let mut out = String::new();
    if run.timeline.is_none() {
        out.push_str(
            "<p class=\"note\">This run has no timeline file (timeline.bin): only the spans \
             are drawn. Runs write one by default to their run directory \
             (GPUSPAN_TIMELINE=on).</p>",
        );
    }
    if !run.summary.epochs.is_empty() {
        let energy = run.summary.epochs.iter().any(|e| e.energy.is_some());
        let throttled = run
            .summary
            .epochs
            .iter()
            .any(|e| !e.throttled.is_empty() || e.epoch_throttled.is_some());
        out.push_str(
            "<h2>Epochs</h2><table id=\"epochs\"><thead><tr><th>epoch</th><th>seconds</th>\
             <th>steps</th><th>GPU start</th><th>GPU peak</th><th>GPU end</th>\
             <th>process GPU peak</th><th>host peak</th>",
        );
        if energy {
            out.push_str("<th>energy</th><th>power</th><th>energy/step</th>");
        }
        if throttled {
            out.push_str("<th>throttled</th>");
        }
        out.push_str("</tr></thead><tbody>");
        for row in &run.summary.epochs {
            let gpu = |f: fn(&gpuspan::runlog::Memory) -> i64| {
                row.gpu.as_ref().map_or("-".into(), |m| mib(f(m)))
            };
            let _ = write!(
                out,
                "<tr><td>{}</td><td>{:.2}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>\
                 <td>{}</td><td>{}</td>",
                row.epoch,
                row.seconds,
                row.steps,
                gpu(|m| m.start),
                gpu(|m| m.peak),
                gpu(|m| m.end),
                row.process_gpu_peak.map_or("-".into(), mib),
                row.host.as_ref().map_or("-".into(), |m| mib(m.peak)),
            );
            if energy {
                let tilde = if row.energy_estimated { "~" } else { "" };
                let _ = write!(
                    out,
                    "<td>{}</td><td>{}</td><td>{}</td>",
                    row.energy
                        .map_or("-".into(), |j| format!("{tilde}{}", joules(j))),
                    row.power.map_or("-".into(), watts),
                    row.step_energy.map_or("-".into(), joules),
                );
            }
            if throttled {
                let _ = write!(
                    out,
                    "<td class=\"throttled\">{}</td>",
                    match (&row.epoch_throttled, row.throttled.is_empty()) {
                        (_, false) => escape(&row.throttled.describe()),
                        (Some(reasons), true) => escape(&format!("the epoch{reasons}")),
                        (None, true) => "-".to_owned(),
                    }
                );
            }
            out.push_str("</tr>");
        }
        out.push_str("</tbody></table>");
        if let Some(line) = run.summary.energy_line() {
            let _ = write!(out, "<p id=\"energy\">{}</p>", escape(&line));
        }
    }
    if let Some(fit) = &run.fit {
        let _ = write!(
            out,
            "<h2>Batch size</h2><p>Step peak ≈ {} + {} per sample (least squares over {} \
             steps of {} batch sizes){}.</p>",
            mib(fit.fixed_bytes),
            mib(fit.per_sample_bytes),
            fit.steps,
            fit.batch_sizes,
            match (fit.limit_bytes, fit.max_batch_size) {
                (Some(limit), Some(b)) => format!(
                    "; the largest batch within {} (the devices' budget, else their total) \
                     is {b}",
                    mib(limit)
                ),
                _ => String::new(),
            },
        );
    }
    out
}

//! The run as one SVG picture, for embedding (and for the PNG): each device's memory as a
//! per-pixel min/max envelope computed from the full-resolution timeline, the epochs and
//! steps beneath on the same axis, and the diagnosis markers.

use std::fmt::Write as _;

use gpuspan::runlog::Role;

use super::envelope::envelope;
use super::html::escape;
use super::run::Run;

const LEFT: f64 = 80.0;
const RIGHT: f64 = 16.0;
const TOP: f64 = 36.0;
const LANE: f64 = 140.0;
const GAP: f64 = 26.0;
const BAR: f64 = 18.0;

/// An axis label, with enough decimals to tell ticks `step` apart.
fn mib(bytes: f64, step: f64) -> String {
    if bytes >= 1073741824.0 {
        let decimals = if step < 107374182.4 { 2 } else { 1 };
        crate::util::gib(bytes, decimals)
    } else {
        crate::util::mib(bytes, 0)
    }
}

fn nice_step(span: f64, target: f64) -> f64 {
    let raw = span / target;
    let p = 10f64.powf(raw.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .into_iter()
        .map(|m| m * p)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * p)
}

fn seconds(t: f64) -> String {
    if t >= 3600.0 {
        format!(
            "{:.0} h {:.0} min",
            (t / 3600.0).floor(),
            (t % 3600.0 / 60.0).floor()
        )
    } else if t >= 60.0 {
        format!("{:.0} min {:.0} s", (t / 60.0).floor(), t % 60.0)
    } else {
        format!("{t:.2} s")
    }
}

/// The picture of `run`, `width` pixels wide (at least 320).
pub fn svg(run: &Run, width: u32) -> String {
    let width = f64::from(width.max(320));
    let plot = width - LEFT - RIGHT;
    let pixels = plot as usize;
    let (start, end) = run.extent();
    let span = (end - start) as f64;
    let x_of = |t: u64| LEFT + (t as f64 - start as f64) / span * plot;
    let lanes = run.timeline.as_ref().map(super::lanes).unwrap_or_default();
    let devices = lanes.len();
    let bars = TOP + devices as f64 * (LANE + GAP);
    let height = bars + 2.0 * (BAR + 6.0) + 34.0;
    let name = run
        .dir
        .file_name()
        .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
    let mut out = String::new();
    let _ = write!(
        out,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{width}\" height=\"{height}\" \
         viewBox=\"0 0 {width} {height}\" font-family=\"DejaVu Sans, Arial, sans-serif\" \
         font-size=\"12\"><rect width=\"100%\" height=\"100%\" fill=\"#fff\"/>\
         <text x=\"{LEFT}\" y=\"16\" font-size=\"14\" font-weight=\"bold\">gpuspan · {}</text>",
        escape(&name)
    );
    {
        for (i, lane) in lanes.iter().enumerate() {
            let env = envelope(&lane.series.points, start, span / plot, pixels);
            let top = env.iter().flatten().map(|b| b.1).max().unwrap_or(1).max(1) as f64;
            let low = env.iter().flatten().map(|b| b.0).min().unwrap_or(0) as f64;
            // From zero unless everything sits in the upper half (as the page does).
            let ymin = if low > top / 2.0 {
                (low - 0.15 * (top - low) - top * 0.001).max(0.0)
            } else {
                0.0
            };
            let ymax = top + 0.1 * (top - ymin) + 1.0;
            let y0 = TOP + i as f64 * (LANE + GAP);
            let y_of = |v: f64| y0 + LANE - (v - ymin).max(0.0) / (ymax - ymin) * LANE;
            let _ = write!(
                out,
                "<text x=\"{LEFT}\" y=\"{}\">{}</text>\
                 <rect x=\"{LEFT}\" y=\"{y0}\" width=\"{plot}\" height=\"{LANE}\" fill=\"#f6f8fa\"/>",
                y0 - 5.0,
                escape(&lane.label)
            );
            let step = nice_step(ymax - ymin, 4.0);
            let mut v = (ymin / step).ceil() * step;
            while v <= ymax {
                let y = y_of(v);
                let _ = write!(
                    out,
                    "<line x1=\"{LEFT}\" x2=\"{}\" y1=\"{y:.1}\" y2=\"{y:.1}\" stroke=\"#d1d9e0\"/>\
                     <text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\" fill=\"#59636e\">{}</text>",
                    LEFT + plot,
                    LEFT - 6.0,
                    y + 4.0,
                    mib(v, step)
                );
                v += step;
            }
            // Envelope as two paths: the area under the minimum, and the min..max band.
            let mut floor = String::new();
            let mut band = String::new();
            for (x, bucket) in env.iter().enumerate() {
                let Some((lo, hi)) = bucket else { continue };
                let px = LEFT + x as f64;
                let yh = y_of(*hi as f64).min(y0 + LANE - 1.0);
                let yl = y_of(*lo as f64).max(yh + 1.5);
                let _ = write!(floor, "M{px} {yl:.1}V{:.1}", y0 + LANE);
                let _ = write!(band, "M{px} {yh:.1}V{yl:.1}");
            }
            let _ = write!(
                out,
                "<g transform=\"translate(0.5 0)\"><path d=\"{floor}\" stroke=\"#b6d4f5\"/>\
                 <path d=\"{band}\" stroke=\"#0969da\"/></g>"
            );
        }
    }
    // Epoch and step bars; steps narrower than a pixel merge into the pixel's highest peak.
    // Shaded green to red over the range of the step peaks (flat within 1 %).
    let peaks = run
        .spans
        .iter()
        .filter(|s| matches!(s.role, Role::Step(_)))
        .filter_map(|s| s.gpu.map(|m| m.peak as f64));
    let (step_low, step_top) = peaks.fold((f64::MAX, 0f64), |(lo, hi), p| (lo.min(p), hi.max(p)));
    let step_range = if step_top - step_low > step_top * 0.01 {
        step_top - step_low
    } else {
        0.0
    };
    let mut pixel_peak: Vec<Option<f64>> = vec![None; pixels + 1];
    for span in &run.spans {
        let x0 = x_of(span.start_unix_nanos);
        let x1 = x_of(span.end_unix_nanos);
        match span.role {
            Role::Epoch(e) => {
                let _ = write!(
                    out,
                    "<rect x=\"{x0:.1}\" y=\"{bars}\" width=\"{:.1}\" height=\"{BAR}\" fill=\"{}\"/>",
                    (x1 - x0 - 1.0).max(1.0),
                    if e % 2 == 0 { "#a475f9" } else { "#8250df" }
                );
                if x1 - x0 > 60.0 {
                    let _ = write!(
                        out,
                        "<text x=\"{:.1}\" y=\"{}\" text-anchor=\"middle\" fill=\"#fff\">epoch {e}</text>",
                        (x0 + x1) / 2.0,
                        bars + 13.0
                    );
                }
            }
            Role::Step(_) => {
                let peak = span.gpu.map_or(0.0, |m| m.peak as f64);
                let first = (x0 - LEFT).floor().max(0.0) as usize;
                let last = ((x1 - LEFT).floor().max(0.0) as usize).min(pixels);
                for slot in &mut pixel_peak[first.min(pixels)..=last] {
                    *slot = Some(slot.map_or(peak, |p: f64| p.max(peak)));
                }
            }
            _ => {}
        }
    }
    let sy = bars + BAR + 6.0;
    for (x, peak) in pixel_peak.iter().enumerate() {
        if let Some(peak) = peak {
            let f = if step_range > 0.0 {
                (peak - step_low) / step_range
            } else {
                0.0
            };
            let hue = 140.0 - 140.0 * f;
            let _ = write!(
                out,
                "<rect x=\"{}\" y=\"{sy}\" width=\"1\" height=\"{BAR}\" fill=\"hsl({hue:.0},65%,46%)\"/>",
                LEFT + x as f64
            );
        }
    }
    for marker in &run.markers {
        let x = x_of(marker.unix_nanos);
        let _ = write!(
            out,
            "<line x1=\"{x:.1}\" x2=\"{x:.1}\" y1=\"{TOP}\" y2=\"{:.1}\" stroke=\"#cf222e\" \
             stroke-width=\"1.5\"><title>{} on {}</title></line>",
            sy + BAR,
            escape(&marker.name),
            escape(&marker.span)
        );
    }
    let ay = sy + BAR + 6.0;
    let _ = write!(
        out,
        "<text x=\"6\" y=\"{}\">epochs</text><text x=\"6\" y=\"{}\">steps</text>",
        bars + 13.0,
        sy + 13.0
    );
    let seconds_span = span / 1e9;
    let tick = nice_step(seconds_span, (plot / 110.0).max(2.0));
    let mut t = 0.0;
    while t <= seconds_span {
        let x = LEFT + t / seconds_span * plot;
        let _ = write!(
            out,
            "<line x1=\"{x:.1}\" x2=\"{x:.1}\" y1=\"{ay}\" y2=\"{}\" stroke=\"#59636e\"/>\
             <text x=\"{x:.1}\" y=\"{}\" text-anchor=\"middle\" fill=\"#59636e\">{}</text>",
            ay + 4.0,
            ay + 16.0,
            seconds(t)
        );
        t += tick;
    }
    out.push_str("</svg>\n");
    out
}

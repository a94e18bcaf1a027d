//! The page of a job of several ranks: a lane per rank, the steps aligned by their index
//! (epoch, `ml.step`) so that step 57 of every rank stands in one column, each step's bar as
//! high as its peak; the worst rank of each step drawn in the warning colour; then the job's
//! table per epoch and the first rank out of memory. One file, no script: the figures are
//! in the SVG and each bar's tooltip.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use super::html::escape;
use gpuspan::runlog::bytes::human;
use gpuspan::runlog::energy::{joules, watts};
use gpuspan::runlog::ranks::{percent, step_label, JobRow, JobTable, StepKey};

/// Columns drawn at most: a longer job shows each column as the highest of the steps it
/// stands for, so that a spike is never averaged away.
pub(crate) const MAX_COLUMNS: usize = 1500;

const STYLE: &str = include_str!("page.css");
const LANE_HEIGHT: f64 = 56.0;
const LABEL_WIDTH: f64 = 90.0;
const PLOT_WIDTH: f64 = 1100.0;

/// The page of `job`, titled `name`.
pub fn job_html(job: &JobTable, name: &str) -> String {
    let title = escape(name);
    let ranks = job.ranks();
    let mut page = String::with_capacity(64 * 1024);
    let _ = write!(
        page,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>gpuspan · job {title}</title><style>{STYLE}\
         .lane .bar{{fill:#0969da}}.lane .bar.worst{{fill:#cf222e}}\
         .lane .bar.throttled{{stroke:#bf8700;stroke-width:2}}\
         .lane text{{font:12px system-ui,sans-serif;fill:#1f2328}}\
         .alarm{{color:#cf222e;font-weight:600}}</style></head><body>\
         <header><h1>gpuspan · job {title} · {n} ranks</h1><p class=\"hint\">A lane per \
         rank, a column per step index; each bar is the step's peak device memory, red \
         where that rank held the most. Hover a bar for its figures.</p></header>",
        n = ranks.len(),
    );
    if let Some(line) = job.first_out_of_memory() {
        let _ = write!(
            page,
            "<p class=\"alarm\" id=\"first-oom\">{}</p>",
            escape(&line)
        );
    }
    if let Some(line) = job.first_forecast() {
        let _ = write!(
            page,
            "<p class=\"alarm\" id=\"first-forecast\">{}</p>",
            escape(&line)
        );
    }
    for line in job.throttled_ranks() {
        let _ = write!(
            page,
            "<p class=\"alarm\" data-throttled>{}</p>",
            escape(&line)
        );
    }
    page.push_str(&lanes(job));
    page.push_str(&epoch_table(job));
    page.push_str(&energy_table(job));
    page.push_str("</body></html>\n");
    page
}

/// The SVG of the lanes.
fn lanes(job: &JobTable) -> String {
    let ranks = job.ranks();
    let by_rank = job.steps_by_rank();
    let keys: Vec<StepKey> = by_rank
        .iter()
        .flat_map(|steps| steps.keys().copied())
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let rows = job.steps();
    let top = by_rank
        .iter()
        .flat_map(|steps| steps.values().filter_map(|f| f.peak))
        .max()
        .unwrap_or(0)
        .max(1);
    let per_column = keys.len().div_ceil(MAX_COLUMNS).max(1);
    let columns = keys.len().div_ceil(per_column);
    let width = PLOT_WIDTH / columns.max(1) as f64;
    let height = LANE_HEIGHT * ranks.len() as f64;
    let mut svg = String::new();
    let _ = write!(
        svg,
        "<h2>Ranks</h2><svg id=\"lanes\" xmlns=\"http://www.w3.org/2000/svg\" \
         width=\"{w}\" height=\"{h}\" viewBox=\"0 0 {w} {h}\" data-steps=\"{steps}\" \
         data-steps-per-column=\"{per_column}\">",
        w = LABEL_WIDTH + PLOT_WIDTH,
        h = height + 20.0,
        steps = keys.len(),
    );
    for (lane, (rank, steps)) in ranks.iter().zip(&by_rank).enumerate() {
        let y0 = LANE_HEIGHT * lane as f64;
        // The lane's highest peak beside its name: a rank far below the job's top still
        // says its figure.
        let highest = steps.values().filter_map(|f| f.peak).max();
        let _ = write!(
            svg,
            "<g class=\"lane\" data-rank=\"{r}\"><text x=\"4\" y=\"{ty}\">rank {r}</text>\
             <text class=\"lane-peak\" x=\"4\" y=\"{py}\">{peak}</text>",
            r = escape(rank),
            ty = y0 + LANE_HEIGHT / 2.0,
            py = y0 + LANE_HEIGHT / 2.0 + 15.0,
            peak = highest.map_or_else(|| "-".to_owned(), human),
        );
        for (column, chunk) in keys.chunks(per_column).enumerate() {
            // The column's highest step of this rank, and whether this rank was the worst
            // at any step of it.
            let mut highest: Option<(StepKey, i64, f64, Option<f64>)> = None;
            let mut worst = false;
            let mut throttled = false;
            for key in chunk {
                let Some(figures) = steps.get(key) else {
                    continue;
                };
                throttled |= figures.throttled;
                worst |= rows
                    .get(key)
                    .and_then(|row| row.worst.as_ref())
                    .is_some_and(|(w, _)| w == rank);
                if let Some(peak) = figures.peak {
                    if highest.is_none_or(|(_, p, _, _)| peak > p) {
                        highest = Some((*key, peak, figures.seconds, figures.energy));
                    }
                }
            }
            let Some((key, peak, seconds, energy)) = highest else {
                continue;
            };
            let bar = (LANE_HEIGHT - 12.0) * peak as f64 / top as f64;
            let _ = write!(
                svg,
                "<rect class=\"bar{worst}{throttle}\" x=\"{x:.2}\" y=\"{y:.2}\" \
                 width=\"{w:.2}\" height=\"{bar:.2}\" data-step=\"{step}\" \
                 data-peak=\"{peak}\"><title>rank {r} · {label}: peak {human}, \
                 {seconds:.3} s{energy}{throttle_text}</title></rect>",
                worst = if worst { " worst" } else { "" },
                throttle = if throttled { " throttled" } else { "" },
                throttle_text = if throttled { ", throttled" } else { "" },
                energy = energy.map_or(String::new(), |j| format!(", {}", joules(j))),
                x = LABEL_WIDTH + width * column as f64,
                y = y0 + LANE_HEIGHT - 6.0 - bar,
                w = (width - 0.5).max(0.5),
                step = key.1,
                r = escape(rank),
                label = step_label(key),
                human = human(peak),
            );
        }
        svg.push_str("</g>");
    }
    let _ = write!(
        svg,
        "<text x=\"{LABEL_WIDTH}\" y=\"{y}\">{first}</text><text x=\"{end}\" y=\"{y}\" \
         text-anchor=\"end\">{last}</text></svg>",
        y = height + 14.0,
        first = keys.first().map_or(String::new(), |k| step_label(*k)),
        last = keys.last().map_or(String::new(), |k| step_label(*k)),
        end = LABEL_WIDTH + PLOT_WIDTH,
    );
    svg
}

/// The job's table per epoch, as HTML.
fn epoch_table(job: &JobTable) -> String {
    let epochs = job.epochs();
    if epochs.is_empty() {
        return String::new();
    }
    let mut out = String::from(
        "<h2>Epochs</h2><table id=\"job-epochs\"><thead><tr><th>epoch</th><th>worst rank</th>\
         <th>worst peak</th><th>lowest peak</th><th>skew</th><th>slowest rank</th>\
         <th>slowest</th></tr></thead><tbody>",
    );
    for (epoch, row) in &epochs {
        let JobRow {
            worst,
            lowest,
            skew,
            slowest,
        } = row;
        let _ = write!(
            out,
            "<tr><td>{epoch}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>\
             <td>{:.2} s</td></tr>",
            worst.as_ref().map_or("-".into(), |(r, _)| escape(r)),
            worst.as_ref().map_or("-".into(), |(_, p)| human(*p)),
            lowest.map_or("-".into(), human),
            percent(*skew),
            escape(&slowest.0),
            slowest.1,
        );
    }
    out.push_str("</tbody></table>");
    if let Some(line) = job.steps_summary() {
        let _ = write!(out, "<p id=\"job-steps\">{}</p>", escape(&line));
    }
    out
}

/// Each rank's energy over its run and the job's, as HTML; nothing when no rank has a
/// figure.
fn energy_table(job: &JobTable) -> String {
    let Some((total, power)) = job.job_energy() else {
        return String::new();
    };
    let mut out = String::from(
        "<h2>Energy</h2><table id=\"job-energy\"><thead><tr><th>rank</th><th>energy</th>\
         <th>power</th></tr></thead><tbody>",
    );
    for rank in job.energy_by_rank() {
        let _ = write!(
            out,
            "<tr data-rank=\"{r}\"><td>{r}</td><td>{}</td><td>{}</td></tr>",
            escape(&rank.energy_text()),
            rank.watts.map_or("-".into(), watts),
            r = escape(&rank.rank),
        );
    }
    // As the terminal's table: `~` when an estimate is in the total, and how many ranks it
    // counts when some have no figure, so a partial sum never reads as the job's.
    let ranks = job.energy_by_rank();
    let counted = ranks.iter().filter(|r| r.joules.is_some()).count();
    let estimated = ranks.iter().any(|r| r.joules.is_some() && r.estimated);
    let partial = if counted < ranks.len() {
        format!(" ({counted} of {} ranks)", ranks.len())
    } else {
        String::new()
    };
    let _ = write!(
        out,
        "</tbody><tfoot><tr id=\"job-energy-total\"><th>job</th><th>{}{}{partial}</th>\
         <th>{}</th></tr></tfoot></table>",
        if estimated { "~" } else { "" },
        joules(total),
        watts(power)
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use gpuspan::runlog::SpanReader;

    /// A span of epoch 0 lasting 10 ms: the epoch itself, or its step 0 carrying `joules`.
    fn span(step: bool, joules: Option<f64>, estimated: bool) -> gpuspan::runlog::SpanRecord {
        let mut reader = SpanReader::default();
        reader.int("ml.epoch", 0);
        if step {
            reader.int("ml.step", 0);
        }
        if let Some(joules) = joules {
            reader.float("gpu.energy", joules);
        }
        let mut record = reader.finish(
            if step { "step" } else { "epoch" }.into(),
            ([1; 16], [step as u8 + 1; 8], step.then_some([1; 8])),
            (0, 10_000_000),
            None,
        );
        record.energy.estimated = estimated;
        record
    }

    #[test]
    fn the_page_s_job_total_says_how_many_ranks_it_counts_and_that_it_is_an_estimate() {
        let mut job = JobTable::default();
        for (rank, joules, estimated) in [
            (0, Some(2.5), true),
            (1, Some(2.5), false),
            (2, None, false),
        ] {
            job.add_rank(&format!("rank-{rank}"));
            job.add_span(&span(false, None, false));
            job.add_span(&span(true, joules, estimated));
        }
        let table = energy_table(&job);
        assert!(
            table.contains("<th>job</th><th>~5.0 J (2 of 3 ranks)</th>"),
            "{table}"
        );
    }
}

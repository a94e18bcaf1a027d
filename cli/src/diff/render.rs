//! The outcome for people: a table for a terminal, Markdown for a pull request's comment
//! and HTML for a notebook. The JSON is the [`Diff`]'s own serialization.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use super::align::{Device, RowKey, Series};
use super::compare::{FigureChange, Row, SpanRef, Unmatched};
use super::Diff;
use gpuspan::runlog::bytes::{human, signed};
use gpuspan::runlog::energy::{joules, signed_joules};

impl Diff {
    /// The table for a terminal: a line per figure of each row, then the worst step of each
    /// run, what only one side has, and the verdict.
    pub fn table(&self) -> String {
        let ranked = self.rows.iter().any(|r| r.rank.is_some());
        let mut grid = vec![header(ranked)];
        for row in &self.rows {
            for figure in &row.figures {
                grid.push(cells(ranked, row, figure));
            }
        }
        let left = if ranked { 3 } else { 2 };
        let mut out = format!(
            "base: {} ({})\nnew:  {} ({})\n\n",
            self.base.path,
            side_note(&self.base),
            self.new.path,
            side_note(&self.new)
        );
        out.push_str(&aligned(&grid, left));
        out.push('\n');
        for line in self.notes() {
            let _ = writeln!(out, "{line}");
        }
        out
    }

    /// Markdown for a pull request's comment: the verdict as a heading, the table, the worst
    /// step of each run with its trace id, and what only one side has.
    pub fn markdown(&self) -> String {
        let ranked = self.rows.iter().any(|r| r.rank.is_some());
        let mut out = format!("### gpuspan diff: {}\n\n", self.verdict());
        let head = header(ranked);
        let _ = writeln!(out, "| {} |", head.join(" | "));
        let align: Vec<&str> = head
            .iter()
            .map(|h| match h.as_str() {
                "compared" | "base" | "new" | "change" => "---:",
                _ => "---",
            })
            .collect();
        let _ = writeln!(out, "|{}|", align.join("|"));
        for row in &self.rows {
            for figure in &row.figures {
                let mut cells = cells(ranked, row, figure);
                if figure.past_limit {
                    for cell in cells.iter_mut().rev().take(2) {
                        *cell = format!("**{cell}**");
                    }
                }
                let _ = writeln!(out, "| {} |", cells.join(" | "));
            }
        }
        out.push('\n');
        for (name, side) in [("Base", &self.base), ("New", &self.new)] {
            if let Some(worst) = &side.worst {
                let worst_span = worst_text(worst, "`");
                let _ = writeln!(out, "**{name}'s worst {}:** {worst_span}  ", worst.phase);
            }
        }
        for (name, unmatched) in [("base", &self.only_base), ("new run", &self.only_new)] {
            for u in unmatched {
                let _ = writeln!(out, "Only in the {name}: {}  ", only(u));
            }
        }
        let _ = writeln!(
            out,
            "\nbase: `{}`, new: `{}`",
            self.base.path, self.new.path
        );
        out
    }

    /// The table as HTML, for a notebook (`_repr_html_`).
    pub fn html(&self) -> String {
        let ranked = self.rows.iter().any(|r| r.rank.is_some());
        let mut out = format!(
            "<p><b>gpuspan diff: {}</b></p>\n<table>\n<tr>",
            escape(&self.verdict())
        );
        for h in header(ranked) {
            let _ = write!(out, "<th>{}</th>", escape(&h));
        }
        out.push_str("</tr>\n");
        for row in &self.rows {
            for figure in &row.figures {
                let style = if figure.past_limit {
                    " style=\"color:#c00;font-weight:bold\""
                } else {
                    ""
                };
                out.push_str("<tr>");
                for cell in cells(ranked, row, figure) {
                    let _ = write!(out, "<td{style}>{}</td>", escape(&cell));
                }
                out.push_str("</tr>\n");
            }
        }
        out.push_str("</table>\n");
        for line in self.notes() {
            let _ = writeln!(out, "<p>{}</p>", escape(&line));
        }
        out
    }

    /// `past the limits: 1 figure`, `within the limits`, or `compared (no limit set)`.
    fn verdict(&self) -> String {
        let past = self.regressions().count();
        if past > 0 {
            format!(
                "{past} figure{} past the limit",
                if past == 1 { "" } else { "s" }
            )
        } else if self.max_increase.is_empty() {
            "compared (no limit set)".to_owned()
        } else {
            "within the limits".to_owned()
        }
    }

    /// The lines under the table.
    fn notes(&self) -> Vec<String> {
        let mut lines = Vec::new();
        for (name, side) in [("base", &self.base), ("new", &self.new)] {
            if let Some(worst) = &side.worst {
                let worst_span = worst_text(worst, "");
                lines.push(format!("worst {} in {name}: {worst_span}", worst.phase));
            }
        }
        for (name, unmatched) in [("base", &self.only_base), ("new", &self.only_new)] {
            for u in unmatched {
                lines.push(format!("only in {name}: {}", only(u)));
            }
        }
        for side in [&self.base, &self.new] {
            for skipped in &side.skipped {
                lines.push(format!("passed over: {skipped}"));
            }
        }
        for (row, figure) in self.regressions() {
            let rank = row
                .rank
                .as_ref()
                .map(|r| format!("rank {r} "))
                .unwrap_or_default();
            let device = match row.device {
                Device::All => String::new(),
                Device::Gpu(id) => format!(" on gpu {id}"),
            };
            lines.push(format!(
                "past the limit: {rank}{} {}{device} {} (limit {})",
                row.phase,
                figure.figure.name(),
                change_text(figure),
                figure.limit.map(|l| l.to_string()).unwrap_or_default()
            ));
        }
        lines.push(self.verdict());
        lines
    }
}

fn header(ranked: bool) -> Vec<String> {
    let mut head = Vec::new();
    if ranked {
        head.push("rank");
    }
    head.extend([
        "phase", "device", "compared", "figure", "base", "new", "change", "limit",
    ]);
    head.into_iter().map(str::to_owned).collect()
}

fn cells(ranked: bool, row: &Row, figure: &FigureChange) -> Vec<String> {
    let mut cells = Vec::new();
    if ranked {
        cells.push(row.rank.as_deref().unwrap_or("-").to_owned());
    }
    let value = |v: Option<i64>| match v {
        None => "-".to_owned(),
        Some(v) if figure.figure.is_bytes() => human(v),
        Some(v) if figure.figure.is_energy() => joules(v as f64 / 1000.0),
        Some(v) => v.to_string(),
    };
    cells.extend([
        row.phase.clone(),
        row.device.to_string(),
        row.compared.to_string(),
        figure.figure.name().to_owned(),
        value(figure.base),
        value(figure.new),
        change_text(figure),
        match figure.limit {
            None => String::new(),
            Some(limit) if figure.past_limit => format!("{limit}: past"),
            Some(limit) => format!("{limit}: ok"),
        },
    ]);
    cells
}

/// `+512 MiB (+25.0 %)`, `0 B`, `-3 (-5.0 %)`, `+2.5 J (+9.1 %)`, or `-` without both
/// figures.
fn change_text(figure: &FigureChange) -> String {
    let Some(change) = figure.change else {
        return "-".to_owned();
    };
    let mut text = if figure.figure.is_bytes() {
        signed(change)
    } else if figure.figure.is_energy() {
        signed_joules(change as f64 / 1000.0)
    } else if change > 0 {
        format!("+{change}")
    } else {
        change.to_string()
    };
    match figure.percent.filter(|_| change != 0) {
        Some(percent) if percent.abs() < 0.1 => {
            let _ = write!(text, " ({percent:+.2} %)");
        }
        Some(percent) => {
            let _ = write!(text, " ({percent:+.1} %)");
        }
        None => {}
    }
    text
}

/// Left-aligned text columns (the first `left` and the figure's name), right-aligned
/// figures, two spaces apart.
fn aligned(grid: &[Vec<String>], left: usize) -> String {
    let columns = grid.first().map_or(0, Vec::len);
    let widths: Vec<usize> = (0..columns)
        .map(|c| grid.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    let figure_column = left + 1;
    let mut out = String::new();
    for row in grid {
        let line: Vec<String> = row
            .iter()
            .enumerate()
            .map(|(c, cell)| {
                if c < left || c == figure_column || c + 1 == columns {
                    format!("{cell:<width$}", width = widths[c])
                } else {
                    format!("{cell:>width$}", width = widths[c])
                }
            })
            .collect();
        let _ = writeln!(out, "{}", line.join("  ").trim_end());
    }
    out
}

fn side_note(side: &super::SideSummary) -> String {
    let spans = format!("{} spans with memory figures", side.spans);
    match side.ranks.len() {
        0 | 1 => spans,
        n => format!("{n} ranks, {spans}"),
    }
}

/// `rank 1 epoch 0 step 3`, `epoch 0 step 3`.
fn span_place(span: &SpanRef) -> String {
    match &span.rank {
        Some(rank) => format!("rank {rank} {}", span.place()),
        None => span.place().to_string(),
    }
}

/// `epoch 0 step 3, 2.0 GiB (trace 0af7...)`, the trace id between two `quote`s.
fn worst_text(worst: &SpanRef, quote: &str) -> String {
    let (place, peak) = (span_place(worst), human(worst.peak));
    format!("{place}, {peak} (trace {quote}{}{quote})", worst.trace_id)
}

/// `step: 2 spans: epoch 0 step 3, epoch 0 step 5`; past five, the first and the last.
fn only(u: &Unmatched) -> String {
    let rank = u
        .rank
        .as_ref()
        .map(|r| format!("rank {r} "))
        .unwrap_or_default();
    let first = u.places.first().map_or("", String::as_str);
    match u.count {
        1 => format!("{rank}{}: 1 span: {first}", u.phase),
        n if n <= 5 => format!("{rank}{}: {n} spans: {}", u.phase, u.places.join(", ")),
        n => format!("{rank}{}: {n} spans, from {first} to {}", u.phase, u.last),
    }
}

/// What a side holds, for the error when the two share nothing: `step (6), epoch (2)` per
/// rank.
pub(super) fn holdings(rows: &BTreeMap<RowKey, Series>) -> String {
    let mut by_rank: BTreeMap<Option<&str>, Vec<String>> = BTreeMap::new();
    for (key, series) in rows.iter().filter(|(k, _)| k.device == Device::All) {
        by_rank
            .entry(key.rank.as_deref())
            .or_default()
            .push(format!("{} ({})", key.phase, series.len()));
    }
    let parts: Vec<String> = by_rank
        .into_iter()
        .map(|(rank, phases)| match rank {
            Some(rank) => format!("rank {rank}: {}", phases.join(", ")),
            None => phases.join(", "),
        })
        .collect();
    if parts.is_empty() {
        "no span with figures".to_owned()
    } else {
        parts.join("; ")
    }
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

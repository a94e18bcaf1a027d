//! The comparison itself: each row both sides have, over the places both have, figure by
//! figure, against the limits; and what only one side has.

use std::collections::BTreeMap;

use serde::Serialize;

use super::align::{Device, Place, Point, RowKey, Series};
use super::figure::Figure;
use super::limits::{Limit, MaxIncrease};
use gpuspan::BatchFit;

/// One span named by where it ran, with the trace to open.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SpanRef {
    /// The rank, in a job.
    pub rank: Option<String>,
    /// The span's name.
    pub phase: String,
    /// The device row it peaked on.
    pub device: Device,
    /// `ml.epoch`, its own or its epoch's.
    pub epoch: Option<i64>,
    /// `ml.step`, its own or its step's.
    pub step: Option<i64>,
    /// Which repeat of its name at that epoch and step (0: the first).
    pub occurrence: u32,
    /// Its peak, in bytes.
    pub peak: i64,
    /// The trace id, in hex.
    pub trace_id: String,
    /// The span id, in hex.
    pub span_id: String,
}

impl SpanRef {
    fn new(key: &RowKey, place: Place, point: &Point) -> Self {
        Self {
            rank: key.rank.clone(),
            phase: key.phase.clone(),
            device: key.device,
            epoch: place.epoch,
            step: place.step,
            occurrence: place.occurrence,
            peak: point.peak,
            trace_id: hex(&point.trace_id),
            span_id: hex(&point.span_id),
        }
    }

    /// Where it ran: `epoch 2 step 57`.
    pub fn place(&self) -> Place {
        Place {
            epoch: self.epoch,
            step: self.step,
            occurrence: self.occurrence,
        }
    }
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    bytes.iter().fold(String::new(), |mut out, b| {
        let _ = write!(out, "{b:02x}");
        out
    })
}

/// One figure of a row on both sides.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FigureChange {
    /// Which figure.
    pub figure: Figure,
    /// The base's figure (`None`: the base's spans do not carry it).
    pub base: Option<i64>,
    /// The new run's figure.
    pub new: Option<i64>,
    /// New minus base, with both.
    pub change: Option<i64>,
    /// The change as a percentage of the base, with a base above zero.
    pub percent: Option<f64>,
    /// The limit `--max-increase` set on the figure.
    pub limit: Option<Limit>,
    /// Whether the change went past that limit.
    pub past_limit: bool,
}

/// One row both sides have: a rank's spans of one name on one device, over the places both
/// have.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Row {
    /// The rank, in a job.
    pub rank: Option<String>,
    /// The span name: `step`, `forward`, `epoch`, `validation`...
    pub phase: String,
    /// `all` (the devices in scope, `gpu.memory.*`) or one device (`0`, `0.mig1`).
    pub device: Device,
    /// Places both sides have, compared.
    pub compared: usize,
    /// Places only the base has.
    pub only_base: usize,
    /// Places only the new run has.
    pub only_new: usize,
    /// The figures either side carries, in [`Figure::ALL`] order.
    pub figures: Vec<FigureChange>,
    /// The compared span with the highest peak, on each side.
    pub worst_base: SpanRef,
    /// See `worst_base`.
    pub worst_new: SpanRef,
}

/// Spans of one row that only one side has.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Unmatched {
    /// The rank, in a job.
    pub rank: Option<String>,
    /// The span name.
    pub phase: String,
    /// How many.
    pub count: usize,
    /// Where they ran, the first [`Unmatched::LISTED`] of them in order.
    pub places: Vec<String>,
    /// Where the last of them ran.
    pub last: String,
}

impl Unmatched {
    /// How many places are listed at most.
    pub const LISTED: usize = 100;
}

/// Both sides' rows, compared.
pub(super) struct Compared {
    pub(super) rows: Vec<Row>,
    pub(super) only_base: Vec<Unmatched>,
    pub(super) only_new: Vec<Unmatched>,
}

/// Compares every row of `base` and `new`; `limits` are the batch-size fit's.
pub(super) fn compare(
    base: &BTreeMap<RowKey, Series>,
    new: &BTreeMap<RowKey, Series>,
    fit_limits: (Option<i64>, Option<i64>),
    max_increase: &MaxIncrease,
) -> Compared {
    let mut out = Compared {
        rows: Vec::new(),
        only_base: Vec::new(),
        only_new: Vec::new(),
    };
    let empty = Series::new();
    let mut keys: Vec<&RowKey> = base.keys().chain(new.keys()).collect();
    keys.sort_by(|a, b| reading_order(a).cmp(&reading_order(b)));
    keys.dedup();
    for key in keys {
        let b = base.get(key).unwrap_or(&empty);
        let n = new.get(key).unwrap_or(&empty);
        let common: Vec<(Place, &Point, &Point)> = b
            .iter()
            .filter_map(|(place, p)| Some((*place, p, n.get(place)?)))
            .collect();
        if key.device == Device::All {
            if let Some(u) = unmatched(key, b, n) {
                out.only_base.push(u);
            }
            if let Some(u) = unmatched(key, n, b) {
                out.only_new.push(u);
            }
        }
        if common.is_empty() {
            continue;
        }
        let limits = if key.device == Device::All {
            fit_limits
        } else {
            (None, None)
        };
        let (base_figures, worst_base) = figures(key, common.iter().map(|c| (c.0, c.1)), limits.0);
        let (new_figures, worst_new) = figures(key, common.iter().map(|c| (c.0, c.2)), limits.1);
        let figures = Figure::ALL
            .into_iter()
            .zip(base_figures.into_iter().zip(new_figures))
            .filter(|(_, (b, n))| b.is_some() || n.is_some())
            .map(|(figure, (base, new))| change(figure, base, new, max_increase.get(figure)))
            .collect();
        out.rows.push(Row {
            rank: key.rank.clone(),
            phase: key.phase.clone(),
            device: key.device,
            compared: common.len(),
            only_base: b.len() - common.len(),
            only_new: n.len() - common.len(),
            figures,
            worst_base,
            worst_new,
        });
    }
    out
}

/// Rows as a reader takes them in: by rank, then the step and its phases in the order they
/// run, the epoch, and any other span by name; all devices before each one.
fn reading_order(key: &RowKey) -> (Option<u64>, &Option<String>, usize, &str, Device) {
    use gpuspan::names::span;
    let phase = [
        span::STEP,
        span::FORWARD,
        span::BACKWARD,
        span::OPTIMIZER,
        span::EPOCH,
    ]
    .iter()
    .position(|p| *p == key.phase)
    .unwrap_or(5);
    let rank = key.rank.as_deref().and_then(|r| r.parse().ok());
    (rank, &key.rank, phase, &key.phase, key.device)
}

fn change(
    figure: Figure,
    base: Option<i64>,
    new: Option<i64>,
    limit: Option<Limit>,
) -> FigureChange {
    let change = base.zip(new).map(|(b, n)| n.saturating_sub(b));
    let percent = base
        .zip(change)
        .filter(|(b, _)| *b > 0)
        .map(|(b, c)| c as f64 / b as f64 * 100.0);
    let past_limit = match (limit, base, new) {
        (Some(limit), Some(b), Some(n)) => limit.is_passed(b, n),
        _ => false,
    };
    FigureChange {
        figure,
        base,
        new,
        change,
        percent,
        limit,
        past_limit,
    }
}

/// One side's figures over the places compared, in [`Figure::ALL`] order, and its worst span.
fn figures<'a>(
    key: &RowKey,
    points: impl Iterator<Item = (Place, &'a Point)> + Clone,
    fit_limit: Option<i64>,
) -> ([Option<i64>; 7], SpanRef) {
    let mut worst: Option<(Place, &Point)> = None;
    let (mut first, mut last) = (None, None);
    let (mut allocated, mut non_allocator) = (None::<i64>, None::<i64>);
    let mut energy = (0_i128, 0_i128);
    for (place, point) in points.clone() {
        if let Some(mj) = point.energy_mj {
            energy = (energy.0 + i128::from(mj), energy.1 + 1);
        }
        if worst.is_none_or(|(_, w)| point.peak > w.peak) {
            worst = Some((place, point));
        }
        first = first.or(Some(point));
        last = Some(point);
        allocated = max(allocated, point.allocated_peak);
        non_allocator = max(non_allocator, point.non_allocator_peak);
    }
    let growth = first
        .and_then(|f| f.start)
        .zip(last.and_then(|l| l.end))
        .map(|(start, end)| end.saturating_sub(start));
    let fit = BatchFit::from_steps(
        points.filter_map(|(_, p)| Some((p.batch_size?, p.peak))),
        fit_limit,
    );
    let (place, point) = worst.unwrap_or((
        Place {
            epoch: None,
            step: None,
            occurrence: 0,
        },
        &Point {
            start: None,
            peak: 0,
            end: None,
            allocated_peak: None,
            non_allocator_peak: None,
            batch_size: None,
            energy_mj: None,
            trace_id: [0; 16],
            span_id: [0; 8],
        },
    ));
    (
        [
            Some(point.peak),
            growth,
            allocated,
            non_allocator,
            fit.map(|f| f.per_sample_bytes),
            fit.and_then(|f| f.max_batch_size),
            // The mean, to the millijoule.
            (energy.1 > 0).then(|| i64::try_from(energy.0 / energy.1).unwrap_or(i64::MAX)),
        ],
        SpanRef::new(key, place, point),
    )
}

fn max(a: Option<i64>, b: Option<i64>) -> Option<i64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.max(b)),
        _ => a.or(b),
    }
}

/// The places of `row` that `other` lacks, if any.
fn unmatched(key: &RowKey, row: &Series, other: &Series) -> Option<Unmatched> {
    let mut places = Vec::new();
    let mut count = 0;
    let mut last = None;
    for place in row.keys().filter(|place| !other.contains_key(place)) {
        if places.len() < Unmatched::LISTED {
            places.push(place.to_string());
        }
        count += 1;
        last = Some(place);
    }
    Some(Unmatched {
        rank: key.rank.clone(),
        phase: key.phase.clone(),
        count,
        places,
        last: last?.to_string(),
    })
}

/// The span with the highest peak of a side's rows named `step` (of any row, without
/// steps).
pub(super) fn worst_of(rows: &BTreeMap<RowKey, Series>) -> Option<SpanRef> {
    let of = |steps_only: bool| {
        rows.iter()
            .filter(|(key, _)| key.device == Device::All)
            .filter(|(key, _)| !steps_only || key.phase == gpuspan::names::span::STEP)
            .flat_map(|(key, series)| series.iter().map(move |(place, p)| (key, *place, p)))
            .fold(
                None::<(&RowKey, Place, &Point)>,
                |best, candidate| match best {
                    Some((_, _, b)) if b.peak >= candidate.2.peak => best,
                    _ => Some(candidate),
                },
            )
            .map(|(key, place, point)| SpanRef::new(key, place, point))
    };
    of(true).or_else(|| of(false))
}

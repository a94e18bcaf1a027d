//! Lines the spans of a side up: every span with memory figures gets a place, the rank, its
//! name and its device (a row), then its epoch and `ml.step` (its own, or those of the
//! epoch and step it runs inside, as a step's phases do) and, for spans that repeat under
//! one step or epoch (a validation loop run twice), which time it was.

use std::collections::{BTreeMap, HashMap};
use std::hash::{BuildHasherDefault, Hasher};

use serde::Serialize;

use super::load::Side;
use gpuspan::runlog::{GpuId, Role, SpanRecord};

/// A row of the comparison: one rank's spans of one name, on one device.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(super) struct RowKey {
    pub(super) rank: Option<String>,
    pub(super) phase: String,
    pub(super) device: Device,
}

/// All the devices in scope (`gpu.memory.*`), or one of them (`gpu.<i>.memory.*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Device {
    /// The devices in scope, summed.
    All,
    /// One GPU or MIG instance.
    Gpu(GpuId),
}

impl std::fmt::Display for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::All => f.write_str("all"),
            Self::Gpu(id) => write!(f, "{id}"),
        }
    }
}

impl Serialize for Device {
    fn serialize<S: serde::Serializer>(&self, out: S) -> Result<S::Ok, S::Error> {
        out.collect_str(self)
    }
}

/// Where a span stands in its run: epoch, step, and which time under them it ran (0 first).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Place {
    /// `ml.epoch` of the span or of the epoch it runs in.
    pub epoch: Option<i64>,
    /// `ml.step` of the span or of the step it runs in.
    pub step: Option<i64>,
    /// Which span of its name under that epoch and step, in start order.
    pub occurrence: u32,
}

impl std::fmt::Display for Place {
    /// `epoch 2 step 57`, `epoch 2`, `step 57`, `the run`; `(2nd)` after a repeat.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.epoch, self.step) {
            (Some(e), Some(s)) => write!(f, "epoch {e} step {s}")?,
            (Some(e), None) => write!(f, "epoch {e}")?,
            (None, Some(s)) => write!(f, "step {s}")?,
            (None, None) => f.write_str("the run")?,
        }
        if self.occurrence > 0 {
            write!(f, " (#{})", self.occurrence + 1)?;
        }
        Ok(())
    }
}

/// One span's figures on one row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Point {
    pub(super) start: Option<i64>,
    pub(super) peak: i64,
    pub(super) end: Option<i64>,
    pub(super) allocated_peak: Option<i64>,
    pub(super) non_allocator_peak: Option<i64>,
    pub(super) batch_size: Option<i64>,
    /// `gpu.energy` (of the device, on a device's row), in millijoules.
    pub(super) energy_mj: Option<i64>,
    pub(super) trace_id: [u8; 16],
    pub(super) span_id: [u8; 8],
}

/// A row's spans by place.
pub(super) type Series = BTreeMap<Place, Point>;

/// A map keyed by what a file holds (span ids, names and indices), with a cheaper hash
/// than SipHash, which guards against keys chosen to collide, not a concern for one's own
/// run.
type Map<K, V> = HashMap<K, V, BuildHasherDefault<Fx>>;

/// The multiply-and-rotate hash of rustc's `FxHasher`, then MurmurHash3's finaliser: a
/// span id's varying bytes are its last, the high bits of a word, and the map indexes by
/// the low bits, so every bit of the word must reach them.
#[derive(Default)]
struct Fx(u64);

impl Hasher for Fx {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(word));
        }
    }

    fn write_u64(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }

    fn finish(&self) -> u64 {
        let mut h = self.0;
        h ^= h >> 33;
        h = h.wrapping_mul(0xff51_afd7_ed55_8ccd);
        h ^= h >> 33;
        h = h.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
        h ^ (h >> 33)
    }
}

/// Every row of a side, with its spans by place.
pub(super) fn rows(side: &Side, one_run: bool) -> BTreeMap<RowKey, Series> {
    let mut rows: BTreeMap<RowKey, Series> = BTreeMap::new();
    for rank in &side.ranks {
        // Two single runs are compared whatever ranks they name.
        let name = if one_run { None } else { rank.rank.clone() };
        // A rank's rows by span name and device, each made a row's key once.
        let mut by_name: Map<(&str, Device), Series> = Map::default();
        let places = places(&rank.spans);
        for (span, place) in rank.spans.iter().zip(places) {
            let mut add = |device: Device, start, peak, end, framework: bool| {
                let joules = match device {
                    Device::All => span.energy.joules,
                    Device::Gpu(id) => span
                        .energy
                        .devices
                        .iter()
                        .find(|(d, _)| *d == id)
                        .map(|(_, j)| *j),
                };
                let point = Point {
                    energy_mj: joules.map(|j| (j * 1000.0).round() as i64),
                    start,
                    peak,
                    end,
                    allocated_peak: span.allocated_peak.filter(|_| framework),
                    non_allocator_peak: non_allocator(span).filter(|_| framework),
                    batch_size: span.batch_size,
                    trace_id: span.trace_id,
                    span_id: span.span_id,
                };
                by_name
                    .entry((span.name.as_str(), device))
                    .or_default()
                    .insert(place, point);
            };
            if let Some(gpu) = span.gpu {
                add(Device::All, Some(gpu.start), gpu.peak, Some(gpu.end), true);
            }
            for device in &span.devices {
                if let Some(peak) = device.peak {
                    add(
                        Device::Gpu(device.id),
                        device.start,
                        peak,
                        device.end,
                        false,
                    );
                }
            }
        }
        for ((phase, device), series) in by_name {
            let key = RowKey {
                rank: name.clone(),
                phase: phase.to_owned(),
                device,
            };
            rows.entry(key).or_default().extend(series);
        }
    }
    rows
}

/// What the process holds on the device beyond the allocator's pool, as the span's
/// `gpu.memory.non_allocator.peak` says it.
fn non_allocator(span: &SpanRecord) -> Option<i64> {
    let (process, reserved) = (span.process_gpu?, span.reserved_peak?);
    Some((process.peak - reserved).max(0))
}

/// The place of each span of one rank, in the order given.
fn places(spans: &[SpanRecord]) -> Vec<Place> {
    let by_id: Map<[u8; 8], usize> = spans
        .iter()
        .enumerate()
        .map(|(i, s)| (s.span_id, i))
        .collect();
    let mut places: Vec<Place> = spans
        .iter()
        .map(|span| {
            let (mut epoch, mut step) = (None, None);
            let mut current = Some(span);
            // A bound on the walk up: a file with a cycle of parents still ends.
            for _ in 0..64 {
                let Some(at) = current else { break };
                match at.role {
                    Role::Epoch(e) if epoch.is_none() => epoch = Some(e),
                    Role::Step(s) if step.is_none() && epoch.is_none() => step = Some(s),
                    _ => {}
                }
                current = at
                    .parent_span_id
                    .and_then(|p| by_id.get(&p))
                    .map(|&i| &spans[i]);
            }
            Place {
                epoch,
                step,
                occurrence: 0,
            }
        })
        .collect();
    // Repeats of a name at one place are told apart by their start order.
    let mut order: Vec<usize> = (0..spans.len()).collect();
    order.sort_by_key(|&i| spans[i].start_unix_nanos);
    let mut seen: Map<(&str, Option<i64>, Option<i64>), u32> = Map::default();
    for i in order {
        let count = seen
            .entry((spans[i].name.as_str(), places[i].epoch, places[i].step))
            .or_default();
        places[i].occurrence = *count;
        *count += 1;
    }
    places
}

//! Energy and power from a card's hwmon directory (`<card>/device/hwmon/hwmon<N>`), in the
//! units of the kernel's hwmon interface: `energy<N>_input` is a counter in microjoules,
//! `power<N>_average` and `power<N>_input` a power in microwatts.
//!
//! - xe and i915: `energy1_input`, the card's counter (xe's `energy2_input`, the package's,
//!   where the card has none). No power file: the power is the counter's increase over the
//!   time between two reads.
//! - amdgpu: no counter; `power1_average` (else `power1_input`), the SoC's power. On an
//!   APU that is the socket's, CPU included; the driver shows the north bridge's rail
//!   (`in1_label` `vddnb`) on APUs only, which is how one is told apart.
//!
//! Read on the sampler thread at the power cadence, never when the source opens a span. A
//! file that cannot be read, a counter that goes back, or a figure past [`MOST_POWER_UW`]
//! gives no figure (never zero) and one warning line naming the file. Files that are gone
//! are looked for again once a second: a driver reload registers the card's hwmon under a
//! new number.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::cards::Driver;
use super::files;
use crate::source::PowerReading;

/// The most power a reading can be, in µW: no GPU, nor the socket an APU's figure
/// includes, draws near 100 kW, so a larger figure (a power file's, or a counter's rise
/// over the time between two reads) is not a measurement, and is refused rather than shown
/// (summed over a run, it would also pass what the sampler's totals hold).
pub(crate) const MOST_POWER_UW: u64 = 100_000_000_000;

/// The shortest time between two reads of a counter the power is taken over: a rise over
/// less says more about when the counter last updated than about the power.
const MIN_WINDOW: Duration = Duration::from_millis(10);

/// The energy and power files of one card.
#[derive(Debug)]
pub(crate) struct Hwmon {
    /// The energy counter, in µJ.
    energy: Option<PathBuf>,
    /// The power, in µW, where the driver has it.
    power: Option<PathBuf>,
    /// The counter's last value and when it was read: the power where no file gives it.
    last: Option<(u64, Instant)>,
    /// The figure includes the CPU (an APU's socket).
    pub(crate) socket: bool,
    /// The card's directory and driver, where the files are looked for again when they
    /// are gone (a driver reload registers its hwmon under a new number).
    card_dir: PathBuf,
    driver: Driver,
    /// When the files were last looked for again.
    sought: Option<Instant>,
    told: Told,
}

/// How often files that are gone are looked for again.
const SEEK_EVERY: Duration = Duration::from_secs(1);

/// Which warning lines were said, each once.
#[derive(Debug, Default)]
struct Told {
    unreadable: bool,
    back: bool,
    implausible: bool,
}

impl Hwmon {
    /// The card's energy and power files, read once as the source opens; `None` when its
    /// driver has neither.
    pub(crate) fn open(card_dir: &Path, driver: Driver) -> Option<Self> {
        let entries = std::fs::read_dir(card_dir.join("hwmon")).ok()?;
        let mut dirs: Vec<PathBuf> = entries
            .filter_map(Result::ok)
            .filter(|e| {
                e.file_name()
                    .to_str()
                    .is_some_and(|n| n.starts_with("hwmon"))
            })
            .map(|e| e.path())
            .collect();
        dirs.sort();
        dirs.into_iter()
            .find_map(|dir| Self::in_dir(&dir, card_dir, driver))
    }

    fn in_dir(dir: &Path, card_dir: &Path, driver: Driver) -> Option<Self> {
        let first = |names: &[&str]| {
            names
                .iter()
                .map(|name| dir.join(name))
                .find(|path| path.is_file())
        };
        let energy = first(&["energy1_input", "energy2_input"]);
        let power = first(&["power1_average", "power1_input"]);
        if energy.is_none() && power.is_none() {
            return None;
        }
        let socket = driver == Driver::Amdgpu
            && files::text(&dir.join("in1_label")).is_some_and(|label| label == "vddnb");
        Some(Self {
            energy,
            power,
            last: None,
            socket,
            card_dir: card_dir.to_path_buf(),
            driver,
            sought: None,
            told: Told::default(),
        })
    }

    /// Reads the counter and the power into `out`; files that are gone are looked for
    /// again, and those found read at once: their power, and their counter as a new one
    /// (not given this read, so that no increase is counted from the old one's value).
    pub(crate) fn read(&mut self, now: Instant, buf: &mut Vec<u8>, out: &mut PowerReading) {
        if self.read_files(now, buf, out) && self.seek(now) {
            self.read_files(now, buf, out);
            out.energy_uj = None;
        }
    }

    /// Reads the files into `out`; whether one of them is gone.
    fn read_files(&mut self, now: Instant, buf: &mut Vec<u8>, out: &mut PowerReading) -> bool {
        let mut gone = false;
        if let Some(path) = &self.energy {
            match files::number(path, buf) {
                Ok(uj) => {
                    let (energy, power) = counter(&mut self.last, &mut self.told, (uj, now), path);
                    out.energy_uj = energy;
                    out.power_mw = power;
                }
                Err(why) => {
                    self.last = None;
                    gone |= why == files::Missing::Absent;
                    unreadable(&why, path, &mut self.told);
                }
            }
        }
        if let Some(path) = &self.power {
            match files::number(path, buf) {
                Ok(uw) if uw > MOST_POWER_UW => {
                    implausible(path, &format!("says {uw} µW"), &mut self.told);
                }
                Ok(uw) => out.power_mw = Some((uw + 500) / 1000),
                Err(why) => {
                    gone |= why == files::Missing::Absent;
                    unreadable(&why, path, &mut self.told);
                }
            }
        }
        gone
    }

    /// Looks for the card's files again, at most every [`SEEK_EVERY`]; whether it found
    /// them elsewhere (read from then on, the counter afresh).
    fn seek(&mut self, now: Instant) -> bool {
        if self
            .sought
            .is_some_and(|at| now.duration_since(at) < SEEK_EVERY)
        {
            return false;
        }
        self.sought = Some(now);
        match Self::open(&self.card_dir, self.driver) {
            Some(found) if (&found.energy, &found.power) != (&self.energy, &self.power) => {
                self.energy = found.energy;
                self.power = found.power;
                self.last = None;
                true
            }
            _ => false,
        }
    }
}

/// The counter's reading `uj` at `now`, and the power since the read before: no
/// reading where it rose past what any GPU draws (the spans open across the jump have
/// no energy, and the next read counts from the new value), and no power yet where the
/// read before is less than [`MIN_WINDOW`] old (the power waits for a longer window
/// from that same read).
fn counter(
    previous: &mut Option<(u64, Instant)>,
    told: &mut Told,
    (uj, now): (u64, Instant),
    path: &Path,
) -> (Option<u64>, Option<u64>) {
    let early = previous.filter(|&(last, at)| uj >= last && now.duration_since(at) < MIN_WINDOW);
    let (power, last) = match early {
        Some((last, _)) => (None, Some(last)),
        None => {
            let last = previous.replace((uj, now));
            let power = last.and_then(|last| from_counter(last, (uj, now), path, told));
            (power, last.map(|(last, _)| last))
        }
    };
    let leap = match (early, power) {
        (Some((last, _)), _) => uj - last > MOST_POWER_UW / 100,
        (None, Some(mw)) => mw > MOST_POWER_UW / 1000,
        (None, None) => false,
    };
    if leap {
        let rise = uj - last.unwrap_or(0);
        *previous = Some((uj, now));
        implausible(
            path,
            &format!("rose by {rise} µJ since its last read"),
            told,
        );
        return (None, None);
    }
    (Some(uj), power)
}

/// The power between two reads of the counter at `path`, in mW: its increase over the time
/// between; `None` when it went back.
fn from_counter(
    (last, at): (u64, Instant),
    (uj, now): (u64, Instant),
    path: &Path,
    told: &mut Told,
) -> Option<u64> {
    if uj < last {
        if !told.back {
            told.back = true;
            eprintln!(
                "gpuspan: warning: {} went back from {last} to {uj} µJ (the driver reloaded \
                 or the counter wrapped): the spans open across it have no energy figure",
                path.display()
            );
        }
        return None;
    }
    let seconds = now.duration_since(at).as_secs_f64();
    (seconds > 0.0).then(|| ((uj - last) as f64 / seconds / 1000.0).round() as u64)
}

/// Says once that a file of the card's gave a figure no GPU draws.
fn implausible(path: &Path, what: &str, told: &mut Told) {
    if !told.implausible {
        told.implausible = true;
        eprintln!(
            "gpuspan: warning: {} {what}, more than any GPU draws (over 100 kW): not a \
             measurement; the spans have no energy or power from it while it says so",
            path.display()
        );
    }
}

/// Says once that a file of the card's cannot be read.
fn unreadable(why: &files::Missing, path: &Path, told: &mut Told) {
    if !told.unreadable {
        told.unreadable = true;
        eprintln!(
            "gpuspan: warning: {}: the spans have no energy or power from this GPU while it \
             cannot be read",
            why.describe(path)
        );
    }
}

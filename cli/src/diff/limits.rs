//! `--max-increase`: how much each figure may grow from the base before the comparison
//! fails. `5%` or `512MiB` limits the peak; `peak=5%,growth=256MiB` names each figure.

use serde::Serialize;

use super::figure::Figure;

/// How far one figure may grow: a share of the base's figure, or bytes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Limit {
    /// A percentage of the base's figure (`5%`).
    Percent(f64),
    /// Bytes (`512MiB`), or a count for `max_batch_size`.
    Bytes(i64),
}

impl Limit {
    /// Whether going from `base` to `new` grows past this limit. A share of a base at or
    /// below zero is passed by any growth.
    pub fn is_passed(self, base: i64, new: i64) -> bool {
        let growth = i128::from(new) - i128::from(base);
        match self {
            Self::Bytes(bytes) => growth > i128::from(bytes),
            Self::Percent(_) if growth <= 0 => false,
            Self::Percent(_) if base <= 0 => true,
            Self::Percent(percent) => growth as f64 > base as f64 * percent / 100.0,
        }
    }
}

impl std::fmt::Display for Limit {
    /// As it is written on the command line: `5%`, `512MiB`, `1073741825B`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            Self::Percent(p) => write!(f, "{p}%"),
            Self::Bytes(b) => {
                for (unit, size) in [("GiB", 1i64 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)] {
                    if b != 0 && b % size == 0 {
                        return write!(f, "{}{unit}", b / size);
                    }
                }
                write!(f, "{b}B")
            }
        }
    }
}

impl Serialize for Limit {
    fn serialize<S: serde::Serializer>(&self, out: S) -> Result<S::Ok, S::Error> {
        out.collect_str(self)
    }
}

/// The limits of a comparison, one per figure at most.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MaxIncrease(Vec<(Figure, Limit)>);

/// Why a `--max-increase` value was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "--max-increase {text:?}: {why}; expected a limit on the peak such as 5% or 512MiB, or \
     limits by figure such as peak=5%,growth=256MiB (figures: {figures})",
    figures = Figure::GATED.map(Figure::name).join(", ")
)]
pub struct BadLimit {
    text: String,
    why: String,
}

impl MaxIncrease {
    /// The limit on `figure`, if any.
    pub fn get(&self, figure: Figure) -> Option<Limit> {
        self.0.iter().find(|(f, _)| *f == figure).map(|(_, l)| *l)
    }

    /// Whether no limit is set: the comparison only reports.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Each limit, by figure.
    pub fn iter(&self) -> impl Iterator<Item = (Figure, Limit)> + '_ {
        self.0.iter().copied()
    }

    /// Adds the limits of one more `--max-increase` value.
    ///
    /// # Errors
    /// The text does not follow the grammar, names a figure twice or a figure that cannot
    /// be limited.
    pub fn add(&mut self, text: &str) -> Result<(), BadLimit> {
        let bad = |why: String| BadLimit {
            text: text.to_owned(),
            why,
        };
        for part in text.split(',').map(str::trim) {
            let (figure, limit) = match part.split_once('=') {
                Some((name, limit)) => {
                    let figure = Figure::GATED
                        .into_iter()
                        .find(|f| f.name() == name.trim())
                        .ok_or_else(|| bad(format!("{:?} is not a figure", name.trim())))?;
                    (figure, limit.trim())
                }
                None => (Figure::Peak, part),
            };
            let limit = parse_limit(limit).map_err(bad)?;
            if figure.is_energy() && !matches!(limit, Limit::Percent(_)) {
                return Err(bad(format!(
                    "energy is limited by a share of the base's, such as energy=10%, not \
                     {limit}"
                )));
            }
            if self.get(figure).is_some() {
                return Err(bad(format!("{} is limited twice", figure.name())));
            }
            self.0.push((figure, limit));
        }
        Ok(())
    }
}

impl std::str::FromStr for MaxIncrease {
    type Err = BadLimit;

    fn from_str(text: &str) -> Result<Self, BadLimit> {
        let mut limits = Self::default();
        limits.add(text)?;
        Ok(limits)
    }
}

/// `5%`, `0.5%`, `512MiB`, `1GB`, `0B`.
fn parse_limit(text: &str) -> Result<Limit, String> {
    if let Some(number) = text.strip_suffix('%') {
        return match number.trim().parse::<f64>() {
            Ok(p) if p.is_finite() && p >= 0.0 => Ok(Limit::Percent(p)),
            _ => Err(format!("{text:?} is not a percentage of 0 or more")),
        };
    }
    match text.parse::<gpuspan::MemoryBudget>() {
        Ok(gpuspan::MemoryBudget::Bytes(bytes)) => i64::try_from(bytes)
            .map(Limit::Bytes)
            .map_err(|_| format!("{text:?} is too large")),
        _ if text == "0" || text.eq_ignore_ascii_case("0b") => Ok(Limit::Bytes(0)),
        _ => Err(format!(
            "{text:?} is neither a percentage nor bytes with a unit"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bare_limit_is_the_peak_s_and_figures_are_named_one_by_one() {
        let limits: MaxIncrease = "5%".parse().unwrap();
        assert_eq!(limits.get(Figure::Peak), Some(Limit::Percent(5.0)));
        let limits: MaxIncrease = "peak=5%, growth=256MiB".parse().unwrap();
        assert_eq!(limits.get(Figure::Growth), Some(Limit::Bytes(256 << 20)));
        assert_eq!(limits.get(Figure::Peak), Some(Limit::Percent(5.0)));
        let limits: MaxIncrease = "512MiB".parse().unwrap();
        assert_eq!(limits.get(Figure::Peak), Some(Limit::Bytes(512 << 20)));
        assert_eq!(Limit::Bytes(512 << 20).to_string(), "512MiB");
        assert_eq!(Limit::Percent(2.5).to_string(), "2.5%");
    }

    #[test]
    fn a_bad_limit_says_what_was_wrong_and_what_is_expected() {
        let err = "peek=5%".parse::<MaxIncrease>().unwrap_err().to_string();
        assert!(err.contains("\"peek\" is not a figure"), "{err}");
        assert!(err.contains("such as peak=5%,growth=256MiB"), "{err}");
        assert!(err.contains("figures: peak, growth,"), "{err}");
        let err = "5".parse::<MaxIncrease>().unwrap_err().to_string();
        assert!(err.contains("neither a percentage nor bytes"), "{err}");
        let err = "5%,peak=1GiB"
            .parse::<MaxIncrease>()
            .unwrap_err()
            .to_string();
        assert!(err.contains("peak is limited twice"), "{err}");
        assert!("-1%".parse::<MaxIncrease>().is_err());
        let err = "energy=5MiB"
            .parse::<MaxIncrease>()
            .unwrap_err()
            .to_string();
        assert!(err.contains("such as energy=10%"), "{err}");
        let limits: MaxIncrease = "energy=10%".parse().unwrap();
        assert_eq!(limits.get(Figure::Energy), Some(Limit::Percent(10.0)));
        assert_eq!(limits.get(Figure::Peak), None);
    }

    #[test]
    fn a_limit_is_passed_only_by_growth_beyond_it() {
        let five = Limit::Percent(5.0);
        assert!(!five.is_passed(1000, 1050));
        assert!(five.is_passed(1000, 1051));
        assert!(!five.is_passed(1000, 900));
        assert!(five.is_passed(0, 1));
        assert!(!Limit::Percent(0.0).is_passed(1000, 1000));
        assert!(!Limit::Bytes(50).is_passed(1000, 1050));
        assert!(Limit::Bytes(50).is_passed(1000, 1051));
        assert!(Limit::Bytes(0).is_passed(i64::MIN, i64::MAX));
    }
}

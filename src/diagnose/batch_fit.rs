//! The batch-size fit: step peak memory as `fixed + per_sample × batch_size`, by least
//! squares over the observed steps, and the largest batch that fits a limit.

/// Peak memory of a step as a line in its batch size: see
/// [`Telemetry::batch_fit`](crate::Telemetry::batch_fit).
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct BatchFit {
    /// Bytes a step needs whatever its batch size (weights, optimizer state, context).
    pub fixed_bytes: i64,
    /// Bytes each sample of a batch adds.
    pub per_sample_bytes: i64,
    /// Root mean square of the steps' distance from the line, in bytes.
    pub error_bytes: i64,
    /// Steps the fit was made over.
    pub steps: usize,
    /// Distinct batch sizes among them.
    pub batch_sizes: usize,
    /// The memory the largest batch is fitted to: the budget if one is set, else the
    /// devices' total (`None`: neither is known).
    pub limit_bytes: Option<i64>,
    /// The largest batch size whose predicted peak stays within `limit_bytes`.
    pub max_batch_size: Option<i64>,
}

/// Collects `(batch_size, step peak)` pairs and fits them.
///
/// The sums are exact integers, so a scripted line comes back to the byte. Figures whose
/// sums or products an `i128` cannot hold (batch sizes near `i64::MAX`) are not fitted: the
/// fit then says it cannot be made, on any input, rather than overflow.
#[derive(Debug, Default, Clone)]
pub(crate) struct BatchFitter {
    n: i128,
    sx: i128,
    sy: i128,
    sxx: i128,
    sxy: i128,
    syy: i128,
    sizes: Vec<i64>,
    /// A step's figures did not fit the exact sums: no fit is made.
    too_large: bool,
}

/// Why no fit was made although steps of two batch sizes were seen.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TooLarge;

impl TooLarge {
    /// The summary's line in place of the fit.
    pub(crate) fn describe(self) -> String {
        "batch-size fit: not made: the steps' batch sizes or peaks are too large to fit \
         exactly"
            .to_owned()
    }
}

/// The summary's line for a fitter's outcome, if any.
pub(crate) fn summary_line(fitter: &BatchFitter, limit: Option<i64>) -> Option<String> {
    match fitter.try_fit(limit) {
        Ok(fit) => fit.map(|fit| fit.describe()),
        Err(too_large) => Some(too_large.describe()),
    }
}

impl BatchFitter {
    /// One step that ran a batch of `batch_size` and peaked at `peak` bytes.
    pub(crate) fn add(&mut self, batch_size: i64, peak: i64) {
        if batch_size <= 0 || peak < 0 || self.too_large {
            return;
        }
        let (x, y) = (i128::from(batch_size), i128::from(peak));
        let sums = (|| {
            Some([
                self.sx.checked_add(x)?,
                self.sy.checked_add(y)?,
                self.sxx.checked_add(x.checked_mul(x)?)?,
                self.sxy.checked_add(x.checked_mul(y)?)?,
                self.syy.checked_add(y.checked_mul(y)?)?,
            ])
        })();
        let Some([sx, sy, sxx, sxy, syy]) = sums else {
            self.too_large = true;
            return;
        };
        (self.sx, self.sy, self.sxx, self.sxy, self.syy) = (sx, sy, sxx, sxy, syy);
        self.n += 1;
        if !self.sizes.contains(&batch_size) && self.sizes.len() < 1024 {
            self.sizes.push(batch_size);
        }
    }

    /// The fit, once steps of at least two batch sizes were seen.
    pub(crate) fn fit(&self, limit: Option<i64>) -> Option<BatchFit> {
        self.try_fit(limit).ok().flatten()
    }

    /// The fit (`None`: fewer than two batch sizes), or why the figures cannot be fitted.
    pub(crate) fn try_fit(&self, limit: Option<i64>) -> Result<Option<BatchFit>, TooLarge> {
        if self.too_large {
            return Err(TooLarge);
        }
        if self.sizes.len() < 2 {
            return Ok(None);
        }
        self.solve(limit).ok_or(TooLarge)
    }

    /// Least squares in exact integers; `None` where a figure overflows.
    fn solve(&self, limit: Option<i64>) -> Option<Option<BatchFit>> {
        let n = self.n;
        let denominator = n
            .checked_mul(self.sxx)?
            .checked_sub(self.sx.checked_mul(self.sx)?)?;
        if denominator == 0 {
            return Some(None);
        }
        let numerator = n
            .checked_mul(self.sxy)?
            .checked_sub(self.sx.checked_mul(self.sy)?)?;
        let b = div_round(numerator, denominator)?;
        let a = div_round(self.sy.checked_sub(b.checked_mul(self.sx)?)?, n)?;
        // Sum of squared residuals from the sums: Σ(y - a - b·x)².
        let terms = [
            self.syy,
            n.checked_mul(a)?.checked_mul(a)?,
            b.checked_mul(b)?.checked_mul(self.sxx)?,
            a.checked_mul(self.sy)?.checked_mul(-2)?,
            b.checked_mul(self.sxy)?.checked_mul(-2)?,
            a.checked_mul(b)?.checked_mul(self.sx)?.checked_mul(2)?,
        ];
        let sse = terms
            .into_iter()
            .try_fold(0i128, |sum, term| sum.checked_add(term))?;
        let error = ((sse.max(0) as f64) / n as f64).sqrt().round() as i64;
        let per_sample = i64::try_from(b).ok()?;
        let fixed = i64::try_from(a).ok()?;
        let max_batch_size = match limit {
            Some(limit) if per_sample > 0 && limit > fixed => {
                let room = i128::from(limit) - i128::from(fixed);
                i64::try_from(room / i128::from(per_sample)).ok()
            }
            Some(_) if per_sample > 0 => Some(0),
            _ => None,
        };
        Some(Some(BatchFit {
            fixed_bytes: fixed,
            per_sample_bytes: per_sample,
            error_bytes: error,
            steps: usize::try_from(n).unwrap_or(usize::MAX),
            batch_sizes: self.sizes.len(),
            limit_bytes: limit,
            max_batch_size,
        }))
    }
}

/// Integer division rounded to the nearest (halves away from zero); `None` on overflow.
fn div_round(numerator: i128, denominator: i128) -> Option<i128> {
    let (numerator, denominator) = if denominator < 0 {
        (numerator.checked_neg()?, denominator.checked_neg()?)
    } else {
        (numerator, denominator)
    };
    let half = denominator / 2;
    let shifted = if numerator >= 0 {
        numerator.checked_add(half)?
    } else {
        numerator.checked_sub(half)?
    };
    shifted.checked_div(denominator)
}

impl BatchFit {
    /// Fits `(batch_size, peak bytes)` pairs, as the run's own fit does, and the largest
    /// batch within `limit` bytes; `None` with fewer than two batch sizes, or figures too
    /// large to fit exactly. For tools that compare runs (`gpuspan diff`).
    pub fn from_steps(
        steps: impl IntoIterator<Item = (i64, i64)>,
        limit: Option<i64>,
    ) -> Option<Self> {
        let mut fitter = BatchFitter::default();
        for (batch_size, peak) in steps {
            fitter.add(batch_size, peak);
        }
        fitter.fit(limit)
    }

    /// What the run in `run_dir` fitted its largest batch to (its budget, else its
    /// devices' total, from `limits.json`); `None` when the run recorded neither.
    pub fn limit_of_run(run_dir: &std::path::Path) -> Option<i64> {
        super::read_batch_limit(run_dir)
    }
}

impl BatchFit {
    /// One line for the summary: the line, its error and the largest batch that fits.
    pub(crate) fn describe(&self) -> String {
        let bytes = crate::util::bytes::human;
        let mut line = format!(
            "batch-size fit: step peak = {} + {} per sample ({} B + {} B; error {}, {} steps, \
             {} batch sizes)",
            bytes(self.fixed_bytes),
            bytes(self.per_sample_bytes),
            self.fixed_bytes,
            self.per_sample_bytes,
            bytes(self.error_bytes),
            self.steps,
            self.batch_sizes
        );
        if let (Some(limit), Some(max)) = (self.limit_bytes, self.max_batch_size) {
            line.push_str(&format!("; largest batch within {}: {max}", bytes(limit)));
        }
        line
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn three_batch_sizes_on_a_line_give_the_per_sample_bytes_exactly() {
        let fixed = 3_000_000_017i64;
        let per_sample = 12_345_679i64;
        let mut fitter = BatchFitter::default();
        for batch in [16, 32, 48] {
            for _ in 0..5 {
                fitter.add(batch, fixed + per_sample * batch);
            }
        }
        let fit = fitter.fit(Some(80 << 30)).unwrap();
        assert_eq!(fit.per_sample_bytes, per_sample);
        assert_eq!(fit.fixed_bytes, fixed);
        assert_eq!(fit.error_bytes, 0);
        assert_eq!(fit.steps, 15);
        assert_eq!(fit.batch_sizes, 3);
        assert_eq!(
            fit.max_batch_size,
            Some(((80i64 << 30) - fixed) / per_sample)
        );
    }

    #[test]
    fn scatter_around_the_line_is_the_fit_error() {
        let mut fitter = BatchFitter::default();
        // ±1000 bytes around 1000 + 100·x.
        for (x, e) in [(10, 1000), (10, -1000), (20, 1000), (20, -1000)] {
            fitter.add(x, 1000 + 100 * x + e);
        }
        let fit = fitter.fit(None).unwrap();
        assert_eq!((fit.fixed_bytes, fit.per_sample_bytes), (1000, 100));
        assert_eq!(fit.error_bytes, 1000);
        assert_eq!(fit.max_batch_size, None);
    }

    #[test]
    fn batch_sizes_near_the_integer_limit_say_the_fit_cannot_be_made() {
        let mut fitter = BatchFitter::default();
        for step in 0..4 {
            fitter.add(i64::MAX - step, 10 << 30);
        }
        assert_eq!(fitter.try_fit(Some(80 << 30)), Err(TooLarge));
        assert_eq!(fitter.fit(None), None);
        // Peaks near the limit too, and both at once.
        let mut fitter = BatchFitter::default();
        fitter.add(1, i64::MAX);
        fitter.add(2, i64::MAX);
        fitter.add(i64::MAX, i64::MAX);
        assert_eq!(fitter.try_fit(None), Err(TooLarge));
    }

    #[test]
    fn one_batch_size_cannot_be_fitted() {
        let mut fitter = BatchFitter::default();
        fitter.add(32, 1 << 30);
        fitter.add(32, 1 << 30);
        assert_eq!(fitter.fit(None), None);
    }

    proptest::proptest! {
        /// Any figures at all: adding and fitting never panic (overflow checks are on in
        /// tests), and a fit that is made keeps its limit and counts.
        #[test]
        fn any_steps_fit_or_say_they_cannot(
            steps in proptest::collection::vec((proptest::num::i64::ANY, proptest::num::i64::ANY), 0..12),
            limit in proptest::option::of(proptest::num::i64::ANY),
        ) {
            let mut fitter = BatchFitter::default();
            for &(batch, peak) in &steps {
                fitter.add(batch, peak);
            }
            if let Ok(Some(fit)) = fitter.try_fit(limit) {
                proptest::prop_assert_eq!(fit.limit_bytes, limit);
                proptest::prop_assert!(fit.batch_sizes >= 2);
                proptest::prop_assert!(fit.error_bytes >= 0);
                proptest::prop_assert!(fit.max_batch_size.is_none_or(|m| m >= 0));
            }
        }

        /// Steps on a line of realistic figures come back exactly.
        #[test]
        fn steps_on_a_line_come_back_to_the_byte(
            fixed in 0i64..(1 << 40),
            per_sample in 0i64..(1 << 30),
            sizes in proptest::collection::btree_set(1i64..100_000, 2..6),
        ) {
            let mut fitter = BatchFitter::default();
            for &batch in &sizes {
                fitter.add(batch, fixed + per_sample * batch);
            }
            let fit = fitter.fit(Some(i64::MAX)).expect("two batch sizes or more");
            proptest::prop_assert_eq!((fit.fixed_bytes, fit.per_sample_bytes), (fixed, per_sample));
            proptest::prop_assert_eq!(fit.error_bytes, 0);
        }
    }
}

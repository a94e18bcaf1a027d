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
#[derive(Debug, Default, Clone)]
pub(crate) struct BatchFitter {
    n: i128,
    sx: i128,
    sy: i128,
    sxx: i128,
    sxy: i128,
    syy: i128,
    sizes: Vec<i64>,
}

impl BatchFitter {
    /// One step that ran a batch of `batch_size` and peaked at `peak` bytes.
    pub(crate) fn add(&mut self, batch_size: i64, peak: i64) {
        if batch_size <= 0 || peak < 0 {
            return;
        }
        let (x, y) = (i128::from(batch_size), i128::from(peak));
        self.n += 1;
        self.sx += x;
        self.sy += y;
        self.sxx += x * x;
        self.sxy += x * y;
        self.syy += y * y;
        if !self.sizes.contains(&batch_size) && self.sizes.len() < 1024 {
            self.sizes.push(batch_size);
        }
    }

    /// The fit, once steps of at least two batch sizes were seen. Sums are kept as exact
    /// integers, so a scripted line comes back to the byte.
    pub(crate) fn fit(&self, limit: Option<i64>) -> Option<BatchFit> {
        if self.sizes.len() < 2 {
            return None;
        }
        let n = self.n;
        let denominator = n * self.sxx - self.sx * self.sx;
        if denominator == 0 {
            return None;
        }
        let numerator = n * self.sxy - self.sx * self.sy;
        let per_sample = div_round(numerator, denominator);
        let fixed = div_round(self.sy - per_sample * self.sx, n);
        // Sum of squared residuals from the sums: Σ(y - a - b·x)².
        let (a, b) = (fixed, per_sample);
        let sse = self.syy + n * a * a + b * b * self.sxx - 2 * a * self.sy - 2 * b * self.sxy
            + 2 * a * b * self.sx;
        let error = ((sse.max(0) as f64) / n as f64).sqrt().round() as i64;
        let per_sample = i64::try_from(per_sample).ok()?;
        let fixed = i64::try_from(fixed).ok()?;
        let max_batch_size = match limit {
            Some(limit) if per_sample > 0 && limit > fixed => Some((limit - fixed) / per_sample),
            Some(_) if per_sample > 0 => Some(0),
            _ => None,
        };
        Some(BatchFit {
            fixed_bytes: fixed,
            per_sample_bytes: per_sample,
            error_bytes: error,
            steps: usize::try_from(n).unwrap_or(usize::MAX),
            batch_sizes: self.sizes.len(),
            limit_bytes: limit,
            max_batch_size,
        })
    }
}

/// Integer division rounded to the nearest (halves away from zero).
fn div_round(numerator: i128, denominator: i128) -> i128 {
    let (numerator, denominator) = if denominator < 0 {
        (-numerator, -denominator)
    } else {
        (numerator, denominator)
    };
    if numerator >= 0 {
        (numerator + denominator / 2) / denominator
    } else {
        (numerator - denominator / 2) / denominator
    }
}

impl BatchFit {
    /// One line for the summary: the line, its error and the largest batch that fits.
    pub(crate) fn describe(&self) -> String {
        let bytes = crate::runlog::format_bytes;
        let mut line = format!(
            "batch-size fit: step peak = {} + {} per sample ({} B; error {}, {} steps, {} \
             batch sizes)",
            bytes(self.fixed_bytes),
            bytes(self.per_sample_bytes),
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
    fn one_batch_size_cannot_be_fitted() {
        let mut fitter = BatchFitter::default();
        fitter.add(32, 1 << 30);
        fitter.add(32, 1 << 30);
        assert_eq!(fitter.fit(None), None);
    }
}

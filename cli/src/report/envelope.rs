//! Min/max envelopes: a figure over a grid of equal time buckets, each bucket holding the
//! lowest and highest value the figure had at any instant inside it. A spike of any length
//! raises the maximum of every bucket it touches, so no width of bucket hides it.

/// Lowest and highest value in one bucket (`None`: not read at any instant of it).
pub(crate) type Bucket = Option<(u64, u64)>;

/// The envelope of a step function (`points` = changes in time order, each value held until
/// the next change) over `buckets` buckets of `width` ns from `start`.
pub(crate) fn envelope(
    points: &[(u64, Option<u64>)],
    start: u64,
    width: f64,
    buckets: usize,
) -> Vec<Bucket> {
    let mut out = Vec::with_capacity(buckets);
    let mut held: Option<u64> = None;
    let mut i = 0;
    while i < points.len() && points[i].0 <= start {
        held = points[i].1;
        i += 1;
    }
    for b in 0..buckets {
        let end = start as f64 + (b + 1) as f64 * width;
        let mut bucket: Bucket = held.map(|v| (v, v));
        while i < points.len() && (points[i].0 as f64) < end {
            held = points[i].1;
            if let Some(v) = held {
                bucket = Some(match bucket {
                    Some((lo, hi)) => (lo.min(v), hi.max(v)),
                    None => (v, v),
                });
            }
            i += 1;
        }
        out.push(bucket);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spike_inside_one_bucket_is_its_maximum() {
        let points = [(0, Some(10)), (1_005, Some(90)), (1_007, Some(10))];
        let buckets = envelope(&points, 0, 1000.0, 3);
        assert_eq!(
            buckets,
            vec![Some((10, 10)), Some((10, 90)), Some((10, 10))]
        );
    }

    #[test]
    fn buckets_before_the_first_reading_are_empty() {
        let points = [(2_500, Some(7)), (2_600, None)];
        let buckets = envelope(&points, 0, 1000.0, 4);
        assert_eq!(buckets, vec![None, None, Some((7, 7)), None]);
    }
}

//! The store's answers against a scan of every sample, and its memory bound.

use super::*;

const MS: u64 = 1_000_000;

/// Reference: the value at `t` is the last sample at or before it.
fn reference(samples: &[(u64, u64)], start: u64, end: u64) -> (Option<u64>, u64, u64) {
    let at = |t: u64| samples.iter().rev().find(|s| s.0 <= t).map(|s| s.1);
    let first = at(start);
    let last = at(end).unwrap();
    let inside = samples
        .iter()
        .filter(|s| s.0 > start && s.0 <= end)
        .map(|s| s.1);
    let peak = inside.chain(first).chain([last]).max().unwrap();
    (first, last, peak)
}

fn small_layout() -> Layout {
    Layout {
        levels: vec![
            (Duration::ZERO, 64),
            (Duration::from_millis(100), 64),
            (Duration::from_secs(1), 64),
        ],
    }
}

#[test]
fn full_resolution_windows_are_exact() {
    let mut store = TimelineStore::new(2, Duration::from_millis(5), &small_layout());
    let mut samples = Vec::new();
    let mut x = 12345u64;
    for i in 0..40u64 {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let v = x >> 40;
        let t = 1_000 * MS + i * 5 * MS;
        store.push(t, &[Some(v), Some(v * 2)]);
        samples.push((t, v));
    }
    for a in 0..45u64 {
        for b in a..45 {
            let (start, end) = (1_000 * MS + a * 5 * MS - MS, 1_000 * MS + b * 5 * MS + MS);
            let w = store.window(start, end).unwrap();
            if start < samples[0].0 {
                assert_eq!(w.start, None);
                continue;
            }
            let (s, e, p) = reference(&samples, start, end);
            assert_eq!(w.start.as_ref().unwrap()[0], s);
            assert_eq!(w.end.as_ref().unwrap()[0], Some(e));
            assert_eq!(w.peak[0], Some(p), "window {a}..{b}");
            assert_eq!(w.peak[1], Some(p * 2));
            assert_eq!(w.resolution_ns, 5 * MS);
        }
    }
}

#[test]
fn a_window_before_the_first_sample_has_no_start_and_one_after_has_nothing() {
    let mut store = TimelineStore::new(1, Duration::from_millis(5), &small_layout());
    store.push(100 * MS, &[Some(7)]);
    store.push(105 * MS, &[Some(9)]);
    assert_eq!(store.window(10 * MS, 50 * MS), None);
    let w = store.window(50 * MS, 104 * MS).unwrap();
    assert_eq!(w.start, None);
    assert_eq!(w.peak, vec![Some(7)]);
    assert_eq!(w.end, Some(vec![Some(7)]));
}

#[test]
fn unmeasured_figures_never_win_or_show() {
    let mut store = TimelineStore::new(2, Duration::from_millis(5), &small_layout());
    store.push(100 * MS, &[Some(3), None]);
    store.push(105 * MS, &[None, None]);
    let w = store.window(100 * MS, 105 * MS).unwrap();
    assert_eq!(w.peak, vec![Some(3), None]);
    assert_eq!(w.end, Some(vec![None, None]));
}

#[test]
fn old_windows_use_bucket_maxima_and_say_so() {
    let mut store = TimelineStore::new(1, Duration::from_millis(10), &small_layout());
    // 64 full slots hold 640 ms; push 3 s so the start is evicted.
    for i in 0..300u64 {
        let v = if i == 37 { 999 } else { i };
        store.push(10_000 * MS + i * 10 * MS, &[Some(v)]);
    }
    // 10.30 s to 10.45 s: at 100 ms resolution, buckets 10.3 and 10.4 (max 999 at 10.37).
    let w = store.window(10_300 * MS, 10_450 * MS).unwrap();
    assert_eq!(w.start, None);
    assert_eq!(w.end, None);
    assert_eq!(w.peak, vec![Some(999)]);
    assert_eq!(w.resolution_ns, 100 * MS);
    let w = store.window(10_400 * MS, 10_450 * MS).unwrap();
    assert_eq!(w.peak, vec![Some(49)]);
    // A recent window is still exact.
    let w = store.window(12_900 * MS, 12_950 * MS).unwrap();
    assert_eq!(w.start, Some(vec![Some(290)]));
    assert_eq!(w.peak, vec![Some(295)]);
    assert_eq!(w.resolution_ns, 10 * MS);
}

/// 24 hours of 8 devices: a sample every second for the day, then the last 11 minutes
/// at 5 ms. Memory stays as allocated (within the budget), recent windows are exact,
/// and older windows get the maxima of the buckets they touch, at the resolution they
/// say, never less than the true peak.
#[test]
fn a_day_of_eight_devices_stays_within_budget_and_windows_are_right_at_every_age() {
    let layout = Layout::devices(9);
    let mut store = TimelineStore::new(9, Duration::from_millis(5), &layout);
    let allocated = store.heap_bytes();
    assert!(allocated <= BUDGET_BYTES, "{allocated}");
    let t0 = 1_700_000_000_000 * MS;
    let day = 86_400_000 * MS;
    let mut samples: Vec<(u64, u64)> = Vec::new();
    let mut x = 7u64;
    let mut push = |store: &mut TimelineStore, t: u64| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let base = (x % 1000) << 20;
        let values: Vec<Option<u64>> = (0..8).map(|d| Some(base + d)).collect();
        let sum: u64 = values.iter().flatten().sum();
        let mut all = values;
        all.push(Some(sum));
        store.push(t, &all);
        samples.push((t, sum));
    };
    let recent = 11 * 60_000 * MS;
    let mut t = t0;
    while t < t0 + day - recent {
        push(&mut store, t);
        t += 1000 * MS;
    }
    while t < t0 + day {
        push(&mut store, t);
        t += 5 * MS;
    }
    assert_eq!(store.heap_bytes(), allocated, "no growth after a day");

    let full_from = samples[samples.len() - (1 << 17)].0;
    let mut y = 99u64;
    for _ in 0..300 {
        y ^= y << 13;
        y ^= y >> 7;
        y ^= y << 17;
        let start = t0 + 1 + y % (day - 2);
        let end = (start + (y >> 20) % (3_600_000 * MS)).min(t0 + day - 1);
        let w = store.window(start, end).unwrap();
        let i_end = samples.partition_point(|s| s.0 <= end) - 1;
        let i_start = samples.partition_point(|s| s.0 <= start) - 1;
        let true_peak = samples[i_start..=i_end].iter().map(|s| s.1).max().unwrap();
        if start >= full_from {
            assert_eq!(w.resolution_ns, 5 * MS);
            assert_eq!(w.peak[8], Some(true_peak));
            assert_eq!(w.start.as_ref().unwrap()[8], Some(samples[i_start].1));
            assert_eq!(w.end.as_ref().unwrap()[8], Some(samples[i_end].1));
        } else {
            let width = w.resolution_ns;
            assert!(width == 100 * MS || width == 1000 * MS, "{width}");
            let lower = samples[i_start].0 - samples[i_start].0 % width;
            let upper = samples[i_end].0 - samples[i_end].0 % width + width;
            let (a, b) = (
                samples.partition_point(|s| s.0 < lower),
                samples.partition_point(|s| s.0 < upper),
            );
            let bucket_peak = samples[a..b].iter().map(|s| s.1).max().unwrap();
            assert_eq!(w.peak[8], Some(bucket_peak), "window {start}..{end}");
            assert!(bucket_peak >= true_peak);
            assert_eq!(w.start, None);
        }
    }
}

#[test]
fn the_device_layout_fits_the_budget_for_eight_devices() {
    let store = TimelineStore::new(9, Duration::from_millis(5), &Layout::devices(9));
    assert!(store.heap_bytes() <= BUDGET_BYTES, "{}", store.heap_bytes());
    let many = TimelineStore::new(17, Duration::from_millis(5), &Layout::devices(17));
    assert!(many.heap_bytes() <= BUDGET_BYTES, "{}", many.heap_bytes());
}

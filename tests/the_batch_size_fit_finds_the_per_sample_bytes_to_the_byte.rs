//! The batch-size fit over step spans that carry `batch_size`: on a scripted run with
//! three batch sizes, `Telemetry::batch_fit` gives the fixed and per-sample bytes exactly,
//! and the largest batch that fits the device; `gpuspan report`'s summary prints the same fit.

use gpuspan_test_support as support;

use std::time::Duration;

use gpuspan::Telemetry;
use support::scripted::scripted;
use support::setup;

const FIXED: u64 = 3_000_000_017;
const PER_SAMPLE: u64 = 12_345_679;
/// The scripted device's total.
const TOTAL: u64 = 80 << 30;

#[test]
fn three_batch_sizes_give_the_per_sample_bytes_exactly() {
    let runs = tempfile::tempdir().unwrap();
    let (source, script) = scripted(1, FIXED);
    let builder = Telemetry::builder()
        .run_dir(runs.path())
        .run_id("fit")
        .summary(false)
        .nvml_lib("/nonexistent/libnvidia-ml.so.1")
        .memory_source(source)
        .sample_interval(Duration::from_millis(2));
    let (telemetry, fit) = setup::run(builder, |telemetry| {
        let mut step = 0;
        for (epoch, batch_size) in [16i64, 32, 48].into_iter().enumerate() {
            let _e = gpuspan::epoch_span!(epoch);
            for _ in 0..3 {
                script.set(0, FIXED + PER_SAMPLE * batch_size as u64);
                script.wait_reads(2);
                let _s = gpuspan::step_span!(step, batch_size = batch_size);
                step += 1;
            }
        }
        telemetry.batch_fit()
    });
    telemetry.shutdown().unwrap();

    let fit = fit.expect("a fit over three batch sizes");
    assert_eq!(fit.per_sample_bytes, PER_SAMPLE as i64);
    assert_eq!(fit.fixed_bytes, FIXED as i64);
    assert_eq!(fit.error_bytes, 0);
    assert_eq!(fit.steps, 9);
    assert_eq!(fit.batch_sizes, 3);
    assert_eq!(fit.limit_bytes, Some(TOTAL as i64));
    assert_eq!(
        fit.max_batch_size,
        Some(((TOTAL - FIXED) / PER_SAMPLE) as i64)
    );

    let summary = gpuspan::runlog::read_run(&runs.path().join("fit")).unwrap();
    // The same fit, fitted to the device's total that the run recorded.
    assert_eq!(summary.batch_fit, Some(fit));
    assert_eq!(
        summary.notes,
        vec![format!(
            "batch-size fit: step peak = 2.8 GiB + 11.8 MiB per sample (3000000017 B + \
             12345679 B; error 0 B, 9 steps, 3 batch sizes); largest batch within 80.0 GiB: {}",
            (TOTAL - FIXED) / PER_SAMPLE
        )]
    );
}

#[test]
fn one_batch_size_gives_no_fit() {
    let runs = tempfile::tempdir().unwrap();
    let (source, script) = scripted(1, FIXED);
    let builder = Telemetry::builder()
        .run_dir(runs.path())
        .run_id("one")
        .summary(false)
        .nvml_lib("/nonexistent/libnvidia-ml.so.1")
        .memory_source(source)
        .sample_interval(Duration::from_millis(2));
    let (telemetry, fit) = setup::run(builder, |telemetry| {
        for step in 0..3 {
            script.set(0, FIXED + step * PER_SAMPLE);
            script.wait_reads(2);
            let _s = gpuspan::step_span!(step, batch_size = 32i64);
        }
        telemetry.batch_fit()
    });
    telemetry.shutdown().unwrap();
    // Three steps, but one batch size: the per-sample bytes cannot be told apart.
    assert_eq!(fit, None);
    let summary = gpuspan::runlog::read_run(&runs.path().join("one")).unwrap();
    assert_eq!(summary.notes, Vec::<String>::new());
}

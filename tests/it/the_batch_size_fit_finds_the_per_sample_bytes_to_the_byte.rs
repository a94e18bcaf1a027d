//! The batch-size fit over step spans that carry `batch_size`: on a scripted run with
//! three batch sizes, `Telemetry::batch_fit` gives the fixed and per-sample bytes exactly,
//! and the largest batch that fits the device; `gpuspan report`'s summary prints the same fit.
//! A batch size given as `usize` or `u64` is fitted the same; one that is not a number is
//! left out, with one warning.

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
fn unsigned_batch_sizes_are_fitted_the_same() {
    let runs = tempfile::tempdir().unwrap();
    let (source, script) = scripted(1, FIXED);
    let builder = Telemetry::builder()
        .run_dir(runs.path())
        .run_id("usize")
        .summary(false)
        .nvml_lib("/nonexistent/libnvidia-ml.so.1")
        .memory_source(source)
        .sample_interval(Duration::from_millis(2));
    let (telemetry, fit) = setup::run(builder, |telemetry| {
        let mut step = 0usize;
        for (epoch, batch_size) in [16usize, 32, 48].into_iter().enumerate() {
            let _e = gpuspan::epoch_span!(epoch);
            for _ in 0..3 {
                script.set(0, FIXED + PER_SAMPLE * batch_size as u64);
                script.wait_reads(2);
                if epoch == 1 {
                    let batch_size = batch_size as u64;
                    let _s = gpuspan::step_span!(step, batch_size = batch_size);
                } else {
                    let _s = gpuspan::step_span!(step, batch_size = batch_size);
                }
                step += 1;
            }
        }
        telemetry.batch_fit()
    });
    telemetry.shutdown().unwrap();
    let fit = fit.expect("a fit over three batch sizes given as usize and u64");
    assert_eq!(fit.per_sample_bytes, PER_SAMPLE as i64);
    assert_eq!(fit.fixed_bytes, FIXED as i64);
    assert_eq!((fit.steps, fit.batch_sizes), (9, 3));
    let summary = gpuspan::runlog::read_run(&runs.path().join("usize")).unwrap();
    assert_eq!(summary.notes.len(), 1, "{:?}", summary.notes);
    assert!(summary.notes[0].starts_with("batch-size fit: step peak = 2.8 GiB + 11.8 MiB"));
}

/// Set in the child process of the test below.
const CHILD: &str = "BATCH_FIT_TEST_CHILD";

#[test]
fn a_batch_size_that_is_not_a_number_is_left_out_with_one_warning() {
    if std::env::var_os(CHILD).is_some() {
        // The child: steps whose batch size is text, then numbers.
        let runs = tempfile::tempdir().unwrap();
        let builder = Telemetry::builder()
            .run_dir(runs.path())
            .run_id("text")
            .summary(false)
            .nvml_lib("/nonexistent/libnvidia-ml.so.1");
        let (telemetry, ()) = setup::run(builder, |_| {
            for step in 0..3 {
                let _s = gpuspan::step_span!(step, batch_size = "large");
            }
            let _s = gpuspan::step_span!(3, batch_size = ?[64]);
            let _s = gpuspan::step_span!(4, batch_size = 64u64);
        });
        telemetry.shutdown().unwrap();
        return;
    }
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            support::test_name(
                module_path!(),
                "a_batch_size_that_is_not_a_number_is_left_out_with_one_warning",
            )
            .as_str(),
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD, "1")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let warnings: Vec<&str> = stderr
        .lines()
        .filter(|line| line.contains("batch_size"))
        .collect();
    assert_eq!(
        warnings,
        vec![
            "gpuspan: warning: step 0 has batch_size = \"large\", which is not a whole number, \
             so the batch-size fit leaves out such steps; give the batch size as an integer \
             (batch_size = 64)"
        ],
        "{stderr}"
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

//! `gpuspan report` reads a run directory back and says the same batch-size fit that
//! `Telemetry::batch_fit` gave at the end of the run: the same steps, the summed peak of
//! the devices in scope against their summed capacity (the budget when one is set, else
//! the devices' total), to the byte.

use gpuspan_test_support as support;

use std::path::Path;
use std::process::Command;

use gpuspan::{BatchFit, MemoryBudget, Telemetry};

use gpuspan::settings::Exporter;
use support::scripted::scripted;
use support::setup;

const MIB: u64 = 1 << 20;
const GIB: u64 = 1 << 30;
/// Per device: fixed bytes and bytes per sample.
const LINES: [(u64, u64); 2] = [(3 * GIB + 17, 5 * MIB + 3), (GIB + 5, 2 * MIB + 1)];

/// Runs six steps of batch sizes 16, 32 and 48 on two scripted devices into `root/<id>`;
/// returns the fit the telemetry gave.
fn run(root: &Path, id: &str, budget: Option<MemoryBudget>) -> BatchFit {
    let (source, script) = scripted(2, 0);
    let mut builder = Telemetry::builder()
        .memory_source(source)
        .metrics_exporter(Exporter::None)
        .summary(false)
        .run_dir(root)
        .run_id(id);
    if let Some(budget) = budget {
        builder = builder.memory_budget(budget);
    }
    let (telemetry, fit) = setup::run(builder, |telemetry| {
        let _epoch = gpuspan::epoch_span!(0);
        for step in 0..6u64 {
            let batch = 16 * (step % 3 + 1);
            for (device, (fixed, per_sample)) in LINES.iter().enumerate() {
                script.set(device, fixed + per_sample * batch);
            }
            script.wait_reads(2);
            let _step = gpuspan::step_span!(step, batch_size = batch as i64);
            script.wait_reads(1);
        }
        drop(_epoch);
        telemetry.flush().expect("flushed");
        telemetry.batch_fit().expect("three batch sizes give a fit")
    });
    telemetry.shutdown().expect("clean shutdown");
    fit
}

/// The fit line `gpuspan report` prints for `dir`.
fn reported(dir: &Path) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_gpuspan"))
        .args(["report", dir.to_str().unwrap()])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
        .lines()
        .find(|l| l.contains("batch-size fit"))
        .unwrap_or_else(|| panic!("no fit in the report: {stdout}"))
        .to_owned()
}

fn check(root: &Path, id: &str, budget: Option<MemoryBudget>, limit: u64) {
    let fit = run(root, id, budget);
    // Two devices summed: the scripted lines come back exactly.
    let fixed: u64 = LINES.iter().map(|l| l.0).sum();
    let per_sample: u64 = LINES.iter().map(|l| l.1).sum();
    assert_eq!(
        (fit.fixed_bytes, fit.per_sample_bytes),
        (fixed as i64, per_sample as i64)
    );
    assert_eq!(fit.limit_bytes, Some(limit as i64));
    let largest = fit.max_batch_size.expect("a limit gives the largest batch");
    assert_eq!(largest, ((limit - fixed) / per_sample) as i64);

    // The report's page draws the same fit.
    let drawn = gpuspan_cli::report::Run::read(&root.join(id)).expect("a run directory");
    assert_eq!(drawn.fit, Some(fit), "{id}");

    let line = reported(&root.join(id));
    assert!(
        line.contains(&format!("({fixed} B + {per_sample} B;")),
        "{id}: {line}"
    );
    assert!(line.contains("6 steps, 3 batch sizes"), "{id}: {line}");
    assert!(line.contains("largest batch within"), "{id}: {line}");
    assert!(line.ends_with(&format!(": {largest}")), "{id}: {line}");
}

#[test]
fn two_devices_without_a_budget_fit_their_summed_total() {
    let root = tempfile::tempdir().unwrap();
    // The scripted devices hold 80 GiB each.
    check(root.path(), "total", None, 2 * 80 * GIB);
}

#[test]
fn two_devices_with_a_budget_fit_their_summed_budget() {
    let root = tempfile::tempdir().unwrap();
    check(
        root.path(),
        "budget",
        Some(MemoryBudget::Bytes(20 * GIB)),
        2 * 20 * GIB,
    );
}

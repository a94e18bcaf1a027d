//! Where the driver keeps per-process accounting, the end of a run holds the peak gpuspan's
//! process lists saw against the driver's own `maxMemoryUsage` and prints the gap; the run
//! directory keeps both, and `gpuspan report` says it again. Where accounting is off, one
//! line says how to turn it on; where the driver has none, nothing is said, as on a MIG
//! instance, where NVML keeps accounting off with no way to turn it on.

use gpuspan_test_support as support;

use std::path::Path;
use std::process::{Command, Output};

use support::example::run_train;
use support::fake_nvml::{mig_uuid_of, FakeNvml};

const MIB: u64 = 1 << 20;

/// `train` on the fake, this process holding 3,000 MiB of device 0 in every list, with
/// `extra` fake settings; the run directory is `root/r1`.
fn train(fake: &FakeNvml, root: &Path, extra: &[(&str, &str)]) -> Output {
    let mut envs = vec![
        ("GPUSPAN_RUN_DIR", root.to_str().unwrap()),
        ("GPUSPAN_RUN_ID", "r1"),
        ("GPUSPAN_NVML_LIB", fake.path().to_str().unwrap()),
        ("FAKE_NVML_PROCESS_MIB", "3000"),
    ];
    envs.extend_from_slice(extra);
    let out = run_train(
        &["--epochs", "1", "--steps", "3", "--batch-size", "8"],
        &envs,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The run's `sampler.json` (run directory `root/r1`), where the driver check is kept.
fn sampler_figures(root: &Path) -> serde_json::Value {
    let path = root.join("r1").join("sampler.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap()
}

#[test]
fn a_peak_the_lists_missed_is_printed_kept_and_reported_with_its_gap() {
    let fake = FakeNvml::build();
    let root = tempfile::tempdir().unwrap();
    // The driver saw this process reach 4,000 MiB between two lists.
    let out = train(
        &fake,
        root.path(),
        &[
            ("FAKE_NVML_ACCOUNTING", "1"),
            ("FAKE_NVML_ACCOUNTED_PEAK_MIB", "4000"),
        ],
    );
    let gap = "GPU 0: 3.9 GiB against 2.9 GiB, 1000 MiB (25.0 %) under";
    let notes = stderr(&out);
    let line = notes
        .lines()
        .find(|l| l.contains("by the driver's accounting"))
        .unwrap_or_else(|| panic!("no accounting line: {notes}"));
    assert!(
        line.starts_with(
            "gpuspan: this process's peak, by the driver's accounting against gpuspan's \
             process lists (read every "
        ),
        "{line}"
    );
    assert!(line.ends_with(gap), "{line}");

    let run = root.path().join("r1");
    let figures = sampler_figures(root.path());
    assert_eq!(
        figures["driver_check"],
        serde_json::json!([{
            "device": 0,
            "listed_peak": 3000 * MIB,
            "driver": {"peak": 4000 * MIB},
        }]),
        "{figures}"
    );

    let report = Command::new(env!("CARGO_BIN_EXE_gpuspan"))
        .args(["report", run.to_str().unwrap()])
        .output()
        .unwrap();
    assert!(report.status.success());
    let notes = stderr(&report);
    assert!(
        notes.lines().any(
            |l| l.starts_with("this process's peak, by the driver's accounting")
                && l.ends_with(gap)
        ),
        "{notes}"
    );
}

#[test]
fn a_peak_the_lists_caught_reads_the_same_as_the_drivers() {
    let fake = FakeNvml::build();
    let root = tempfile::tempdir().unwrap();
    let out = train(&fake, root.path(), &[("FAKE_NVML_ACCOUNTING", "1")]);
    let notes = stderr(&out);
    assert!(
        notes
            .lines()
            .any(|l| l.ends_with("GPU 0: 2.9 GiB against 2.9 GiB, the same")),
        "{notes}"
    );
}

#[test]
fn accounting_off_says_in_one_line_how_to_turn_it_on() {
    let fake = FakeNvml::build();
    let root = tempfile::tempdir().unwrap();
    let out = train(&fake, root.path(), &[]);
    let notes = stderr(&out);
    let lines: Vec<&str> = notes.lines().filter(|l| l.contains("accounting")).collect();
    assert_eq!(
        lines,
        [
            "gpuspan: the driver's accounting is off on GPU 0, so this process's peak was not \
          checked against the driver's; `nvidia-smi --accounting-mode=1` (as root) turns it on"
        ],
        "{notes}"
    );
    let figures = sampler_figures(root.path());
    assert_eq!(figures["driver_check"][0]["driver"], "off", "{figures}");
}

#[test]
fn a_driver_without_accounting_adds_no_line() {
    let fake = FakeNvml::build();
    let root = tempfile::tempdir().unwrap();
    let out = train(
        &fake,
        root.path(),
        &[("FAKE_NVML_FAIL", "nvmlDeviceGetAccountingMode:3")],
    );
    let notes = stderr(&out);
    assert!(!notes.contains("accounting"), "{notes}");
    let figures = sampler_figures(root.path());
    assert_eq!(
        figures["driver_check"][0]["driver"], "unsupported",
        "{figures}"
    );
}

#[test]
fn on_a_mig_instance_no_line_says_to_turn_accounting_on() {
    let fake = FakeNvml::build();
    let root = tempfile::tempdir().unwrap();
    let slot = fake.mig_slot(0, 1).to_string();
    let process = format!("3000:{slot}");
    let instance = mig_uuid_of(0, 1);
    let out = train(
        &fake,
        root.path(),
        &[
            ("FAKE_NVML_MIG", "0:2"),
            ("FAKE_NVML_PROCESS_MIB", &process),
            ("FAKE_NVML_ACCOUNTING", "1"),
            ("CUDA_VISIBLE_DEVICES", &instance),
        ],
    );
    let notes = stderr(&out);
    assert!(!notes.contains("accounting"), "{notes}");
    let figures = sampler_figures(root.path());
    assert_eq!(
        figures["driver_check"],
        serde_json::json!([{
            "device": "0.mig1",
            "listed_peak": 3000 * MIB,
            "driver": "unsupported",
        }]),
        "{figures}"
    );
}

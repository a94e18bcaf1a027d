//! The `train` example run as a user runs it, on the fake NVML, twice with the same memory
//! and once with a change that holds 256 MiB more: `gpuspan diff` on the run directories
//! passes the rerun and fails the change. The fake GPU draws no power, so that the energy
//! rows read the same on every run.

use std::path::Path;
use std::process::Command;

use gpuspan_test_support as support;

use support::commands::{outcome, succeeded};
use support::example::train_command;
use support::fake_nvml::FakeNvml;

/// Runs `train` into `root/<id>` with the device at `used_mib` throughout.
fn train(fake: &FakeNvml, root: &Path, id: &str, used_mib: &str) {
    succeeded(&mut train_command(
        &["--epochs", "2", "--steps", "4", "--batch-size", "16,32"],
        &[
            ("GPUSPAN_RUN_DIR", root.to_str().unwrap()),
            ("GPUSPAN_RUN_ID", id),
            ("GPUSPAN_NVML_LIB", fake.path().to_str().unwrap()),
            ("FAKE_NVML_USED_MIB", used_mib),
            ("FAKE_NVML_POWER_W", "0"),
        ],
    ));
}

fn diff(root: &Path, base: &str, new: &str, args: &[&str]) -> (i32, String, String) {
    outcome(
        Command::new(env!("CARGO_BIN_EXE_gpuspan"))
            .arg("diff")
            .arg(root.join(base))
            .arg(root.join(new))
            .args(args),
    )
}

/// The trace id, in hex, of the run's step 0 of epoch 0.
fn first_step_trace(run: &Path) -> String {
    let spans = support::example::read_spans(run);
    let epoch0 = spans
        .iter()
        .find(|s| s.name == "epoch" && support::example::int(s, "ml.epoch") == Some(0))
        .expect("epoch 0");
    let step = spans
        .iter()
        .find(|s| {
            s.name == "step"
                && s.parent_span_id == epoch0.span_id
                && support::example::int(s, "ml.step") == Some(0)
        })
        .expect("step 0 of epoch 0");
    step.trace_id.iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn a_rerun_passes_and_a_change_that_adds_256_mib_fails_a_5_percent_limit() {
    let fake = FakeNvml::build();
    let root = tempfile::tempdir().unwrap();
    train(&fake, root.path(), "base", "2048");
    train(&fake, root.path(), "rerun", "2048");
    train(&fake, root.path(), "change", "2304");

    let (code, stdout, stderr) = diff(root.path(), "base", "rerun", &["--max-increase", "5%"]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    assert!(
        stdout.contains(
            "
phase  device  compared  figure               base      new  change  limit
step   all            8  peak              2.0 GiB  2.0 GiB     0 B  5%: ok
step   all            8  growth                0 B      0 B     0 B
step   all            8  bytes_per_sample      0 B      0 B     0 B
step   all            8  energy              0.0 J    0.0 J   0.0 J
epoch  all            2  peak              2.0 GiB  2.0 GiB     0 B  5%: ok
epoch  all            2  growth                0 B      0 B     0 B
epoch  all            2  energy              0.0 J    0.0 J   0.0 J
"
        ),
        "{stdout}"
    );
    assert!(stdout.ends_with("\nwithin the limits\n"), "{stdout}");

    let (code, stdout, stderr) = diff(root.path(), "base", "change", &["--max-increase", "5%"]);
    assert_eq!(code, 1, "{stdout}{stderr}");
    let expected = format!(
        "base: {base} (10 spans with memory figures)
new:  {change} (10 spans with memory figures)

phase  device  compared  figure               base      new              change  limit
step   all            8  peak              2.0 GiB  2.2 GiB  +256 MiB (+12.5 %)  5%: past
step   all            8  growth                0 B      0 B                 0 B
step   all            8  bytes_per_sample      0 B      0 B                 0 B
step   all            8  energy              0.0 J    0.0 J               0.0 J
epoch  all            2  peak              2.0 GiB  2.2 GiB  +256 MiB (+12.5 %)  5%: past
epoch  all            2  growth                0 B      0 B                 0 B
epoch  all            2  energy              0.0 J    0.0 J               0.0 J

worst step in base: epoch 0 step 0, 2.0 GiB (trace {base_trace})
worst step in new: epoch 0 step 0, 2.2 GiB (trace {change_trace})
past the limit: step peak +256 MiB (+12.5 %) (limit 5%)
past the limit: epoch peak +256 MiB (+12.5 %) (limit 5%)
2 figures past the limit
",
        base = root.path().join("base").display(),
        change = root.path().join("change").display(),
        base_trace = first_step_trace(&root.path().join("base")),
        change_trace = first_step_trace(&root.path().join("change")),
    );
    assert_eq!(stdout, expected);

    // The same runs pass a limit the change stays within.
    let (code, stdout, _) = diff(root.path(), "base", "change", &["--max-increase", "256MiB"]);
    assert_eq!(code, 0, "{stdout}");
}

//! `gpuspan diff` on runs of different shapes: one run longer than the other, a run with
//! steps missing, jobs of different ranks (as job directories and as one collector's file),
//! and MIG instances as devices. What both have is compared; what only one has is named.

use std::path::{Path, PathBuf};
use std::process::Command;

use gpuspan_test_support::commands::outcome;
use gpuspan_test_support::traces::{flat, write_lines, Mem, Trace, GIB, MIB};

/// The trace of every span the runs here hold: the first epoch's, as [`Trace`] writes it.
const TRACE: &str = "000000000000000000000000d1ff0000";

/// A base and a new run in a temporary directory.
struct Runs {
    root: tempfile::TempDir,
    base: PathBuf,
    new: PathBuf,
}

impl Runs {
    /// Where the runs go, none written yet.
    fn new() -> Runs {
        let root = tempfile::tempdir().unwrap();
        let (base, new) = (root.path().join("base"), root.path().join("new"));
        Runs { root, base, new }
    }

    /// The runs of `base` and `new`, written.
    fn written(base: &Trace, new: &Trace) -> Runs {
        let runs = Runs::new();
        base.write_run(&runs.base);
        new.write_run(&runs.new);
        runs
    }

    /// `gpuspan diff` on the base run and `new` (a run or a file), with `args` after them:
    /// its exit code, stdout and stderr.
    fn diff_with(&self, new: &Path, args: &[&str]) -> (i32, String, String) {
        outcome(
            Command::new(env!("CARGO_BIN_EXE_gpuspan"))
                .arg("diff")
                .arg(&self.base)
                .arg(new)
                .args(args),
        )
    }

    /// `gpuspan diff BASE NEW` with `args` after the runs.
    fn diff(&self, args: &[&str]) -> (i32, String, String) {
        self.diff_with(&self.new, args)
    }

    /// The lines that open what `gpuspan diff` prints: each run, what it holds, then a
    /// blank line.
    fn named(&self, base_holds: &str, new_holds: &str) -> String {
        let base = format!(
            "base: {} ({base_holds} with memory figures)\n",
            self.base.display()
        );
        let new = format!(
            "new:  {} ({new_holds} with memory figures)\n\n",
            self.new.display()
        );
        base + &new
    }
}

/// A run of `epochs` epochs of three steps without phases, each step flat at `bytes`,
/// leaving out the steps in `skip` (as `(epoch, step)`).
fn flat_steps(epochs: i64, bytes: i64, skip: &[(i64, i64)]) -> Trace {
    let mut trace = Trace::new();
    steps(&mut trace, epochs, bytes, skip);
    trace
}

/// Adds to `trace` what [`flat_steps`] makes a run of.
fn steps(trace: &mut Trace, epochs: i64, bytes: i64, skip: &[(i64, i64)]) {
    for epoch in 0..epochs {
        let steps: Vec<(i64, Mem)> = (0..3)
            .filter(|step| !skip.contains(&(epoch, *step)))
            .map(|step| (step, flat(bytes)))
            .collect();
        trace.epoch(epoch, &steps, |_, _| None);
    }
}

#[test]
fn a_longer_run_is_compared_over_the_epochs_both_ran_and_its_extra_epoch_is_named() {
    let runs = Runs::written(&flat_steps(2, 2 * GIB, &[]), &flat_steps(3, 2 * GIB, &[]));
    let (code, stdout, stderr) = runs.diff(&["--max-increase", "1%"]);
    assert_eq!(code, 0, "{stdout}{stderr}");
    let expected = runs.named("8 spans", "12 spans")
        + &format!(
            "phase  device  compared  figure     base      new  change  limit
step   all            6  peak    2.0 GiB  2.0 GiB     0 B  1%: ok
step   all            6  growth      0 B      0 B     0 B
epoch  all            2  peak    2.0 GiB  2.0 GiB     0 B  1%: ok
epoch  all            2  growth      0 B      0 B     0 B

worst step in base: epoch 0 step 0, 2.0 GiB (trace {TRACE})
worst step in new: epoch 0 step 0, 2.0 GiB (trace {TRACE})
only in new: step: 3 spans: epoch 2 step 0, epoch 2 step 1, epoch 2 step 2
only in new: epoch: 1 span: epoch 2
within the limits
"
        );
    assert_eq!(stdout, expected);
}

#[test]
fn steps_missing_from_one_run_are_named_and_the_rest_compared() {
    // The new run lost two steps of epoch 0 and one of epoch 1, and holds 1 MiB more.
    let runs = Runs::written(
        &flat_steps(2, 2 * GIB, &[]),
        &flat_steps(2, 2 * GIB + MIB, &[(0, 0), (0, 2), (1, 1)]),
    );
    let (code, stdout, stderr) = runs.diff(&["--max-increase", "0B"]);
    assert_eq!(code, 1, "{stdout}{stderr}");
    let expected = runs.named("8 spans", "5 spans")
        + &format!(
            "phase  device  compared  figure     base      new              change  limit
step   all            3  peak    2.0 GiB  2.0 GiB  +1.0 MiB (+0.05 %)  0B: past
step   all            3  growth      0 B      0 B                 0 B
epoch  all            2  peak    2.0 GiB  2.0 GiB  +1.0 MiB (+0.05 %)  0B: past
epoch  all            2  growth      0 B      0 B                 0 B

worst step in base: epoch 0 step 0, 2.0 GiB (trace {TRACE})
worst step in new: epoch 0 step 1, 2.0 GiB (trace {TRACE})
only in base: step: 3 spans: epoch 0 step 0, epoch 0 step 2, epoch 1 step 1
past the limit: step peak +1.0 MiB (+0.05 %) (limit 0B)
past the limit: epoch peak +1.0 MiB (+0.05 %) (limit 0B)
2 figures past the limit
"
        );
    assert_eq!(stdout, expected);
}

/// A job's directory with a `rank-<r>` run per rank, rank `r` flat at `bytes(r)`.
fn job(dir: &Path, ranks: i64, bytes: impl Fn(i64) -> i64) -> Vec<Trace> {
    (0..ranks)
        .map(|rank| {
            let mut trace = Trace::rank(rank);
            steps(&mut trace, 1, bytes(rank), &[]);
            trace.write_run(&dir.join(format!("rank-{rank}")));
            trace
        })
        .collect()
}

#[test]
fn jobs_of_different_ranks_compare_the_ranks_both_ran_whether_directories_or_one_collector_file() {
    let runs = Runs::new();
    job(&runs.base, 2, |_| 4 * GIB);
    // Rank 1 holds 10 % more; rank 2 is new.
    let traces = job(&runs.new, 3, |rank| {
        if rank == 1 {
            4 * GIB + 4 * GIB / 10
        } else {
            4 * GIB
        }
    });
    let (code, stdout, stderr) = runs.diff(&["--max-increase", "peak=5%"]);
    assert_eq!(code, 1, "{stdout}{stderr}");
    let expected = runs.named("2 ranks, 8 spans", "3 ranks, 12 spans")
        + &format!(
            "rank  phase  device  compared  figure     base      new              change  limit
0     step   all            3  peak    4.0 GiB  4.0 GiB                 0 B  5%: ok
0     step   all            3  growth      0 B      0 B                 0 B
0     epoch  all            1  peak    4.0 GiB  4.0 GiB                 0 B  5%: ok
0     epoch  all            1  growth      0 B      0 B                 0 B
1     step   all            3  peak    4.0 GiB  4.4 GiB  +410 MiB (+10.0 %)  5%: past
1     step   all            3  growth      0 B      0 B                 0 B
1     epoch  all            1  peak    4.0 GiB  4.4 GiB  +410 MiB (+10.0 %)  5%: past
1     epoch  all            1  growth      0 B      0 B                 0 B

worst step in base: rank 0 epoch 0 step 0, 4.0 GiB (trace {TRACE})
worst step in new: rank 1 epoch 0 step 0, 4.4 GiB (trace {TRACE})
only in new: rank 2 step: 3 spans: epoch 0 step 0, epoch 0 step 1, epoch 0 step 2
only in new: rank 2 epoch: 1 span: epoch 0
past the limit: rank 1 step peak +410 MiB (+10.0 %) (limit 5%)
past the limit: rank 1 epoch peak +410 MiB (+10.0 %) (limit 5%)
2 figures past the limit
"
        );
    assert_eq!(stdout, expected);

    // The same spans as one collector wrote them: every rank's requests in one file, told
    // apart by their resource's ml.rank.
    let file = runs.root.path().join("collector.json");
    let lines: Vec<String> = traces.iter().flat_map(Trace::lines).collect();
    write_lines(&file, &lines);
    let (code, from_file, _) = runs.diff_with(&file, &["--max-increase", "peak=5%"]);
    assert_eq!(code, 1);
    let new_line = format!(
        "new:  {} (3 ranks, 12 spans with memory figures)\n",
        runs.new.display()
    );
    let file_line = format!(
        "new:  {} (3 ranks, 12 spans with memory figures)\n",
        file.display()
    );
    assert_eq!(from_file, stdout.replace(&new_line, &file_line));
}

/// Steps on two MIG instances of GPU 0, as a run with both in scope records them.
fn mig_run(second: i64) -> Trace {
    let mut trace = Trace::new();
    for step in 0..3 {
        let id = trace.reserve_id();
        let devices = [
            ("gpu.0.mig1.memory", 3 * GIB),
            ("gpu.0.mig2.memory", second),
        ];
        let mut ints = vec![("ml.step", step)];
        let keys: Vec<(String, i64)> = devices
            .iter()
            .flat_map(|(prefix, bytes)| {
                ["start", "peak", "end"].map(|figure| (format!("{prefix}.{figure}"), *bytes))
            })
            .collect();
        ints.extend(keys.iter().map(|(k, v)| (k.as_str(), *v)));
        trace.span("step", &id, None, Some(flat(3 * GIB + second)), &ints);
    }
    trace
}

#[test]
fn mig_instances_are_devices_of_their_own_and_each_is_held_to_the_limit() {
    // The second instance holds 256 MiB more: 12.5 % of it, under 5 % of the two together.
    let runs = Runs::written(&mig_run(2 * GIB), &mig_run(2 * GIB + 256 * MIB));
    let (code, stdout, stderr) = runs.diff(&["--max-increase", "10%"]);
    assert_eq!(code, 1, "{stdout}{stderr}");
    let expected = runs.named("3 spans", "3 spans")
        + &format!(
            "phase  device  compared  figure     base      new              change  limit
step   all            3  peak    5.0 GiB  5.2 GiB   +256 MiB (+5.0 %)  10%: ok
step   all            3  growth      0 B      0 B                 0 B
step   0.mig1         3  peak    3.0 GiB  3.0 GiB                 0 B  10%: ok
step   0.mig1         3  growth      0 B      0 B                 0 B
step   0.mig2         3  peak    2.0 GiB  2.2 GiB  +256 MiB (+12.5 %)  10%: past
step   0.mig2         3  growth      0 B      0 B                 0 B

worst step in base: step 0, 5.0 GiB (trace {TRACE})
worst step in new: step 0, 5.2 GiB (trace {TRACE})
past the limit: step peak on gpu 0.mig2 +256 MiB (+12.5 %) (limit 10%)
1 figure past the limit
"
        );
    assert_eq!(stdout, expected);
}

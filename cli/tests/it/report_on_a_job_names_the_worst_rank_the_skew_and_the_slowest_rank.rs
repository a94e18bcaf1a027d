//! `gpuspan report` on a job's directory (one `rank-<r>` run directory per rank) prints each
//! rank's table, then the job's: per epoch the rank with the highest peak, the lowest
//! peak, the skew (max - min) / max and the slowest rank, and over the steps every rank
//! ran, the widest skew and the ranks most often worst and slowest.

use gpuspan_test_support as support;

use std::path::Path;
use std::process::Command;

use support::commands::{folded_lines, succeeded};
use support::example::train_command;
use support::fake_nvml::FakeNvml;

/// Rank `rank` of a 3-rank job `j1` under `root`: its device holds 1,000 MiB per rank
/// number plus one, and rank 1 trains a model a hundred times wider, so it is the slowest.
fn rank(fake: &FakeNvml, root: &Path, rank: u32) {
    let used = (1000 * (rank + 1)).to_string();
    let hidden = if rank == 1 { "800" } else { "8" };
    succeeded(&mut train_command(
        &["--epochs", "2", "--steps", "3", "--hidden", hidden],
        &[
            ("GPUSPAN_RUN_DIR", root.to_str().unwrap()),
            ("GPUSPAN_RUN_ID", "j1"),
            ("RANK", &rank.to_string()),
            ("WORLD_SIZE", "3"),
            ("GPUSPAN_NVML_LIB", fake.path().to_str().unwrap()),
            ("FAKE_NVML_USED_MIB", &used),
        ],
    ));
}

fn report(dir: &Path) -> Vec<String> {
    let out = succeeded(
        Command::new(env!("CARGO_BIN_EXE_gpuspan"))
            .arg("report")
            .arg(dir),
    );
    folded_lines(&out.stdout)
}

#[test]
fn the_job_table_follows_the_ranks_tables() {
    let fake = FakeNvml::build();
    let root = tempfile::tempdir().unwrap();
    for r in 0..3 {
        rank(&fake, root.path(), r);
    }
    let lines = report(&root.path().join("j1"));
    let at = lines
        .iter()
        .position(|l| l == "job of 3 ranks")
        .unwrap_or_else(|| panic!("no job table: {lines:#?}"));
    assert_eq!(
        lines[at + 1],
        "epoch worst rank worst peak lowest peak skew slowest rank slowest"
    );
    // 3,000 MiB against 1,000 MiB: two thirds apart.
    for epoch in 0..2 {
        let row = &lines[at + 2 + epoch];
        assert!(
            row.starts_with(&format!("{epoch} 2 2.9 GiB 1000 MiB 66.7 % 1 ")),
            "{row}"
        );
        assert!(row.ends_with(" s"), "{row}");
    }
    assert_eq!(
        lines[at + 4],
        "steps: 6 on every rank; the widest skew at epoch 0 step 0 (66.7 %, rank 2 at 2.9 \
         GiB); the highest peak most often on rank 2 (6 of 6); the slowest most often rank \
         1 (6 of 6)"
    );
    // Each rank's own table came first.
    for r in 0..3 {
        assert!(
            lines[..at]
                .iter()
                .any(|l| l.ends_with(&format!("rank-{r}"))),
            "{lines:#?}"
        );
    }

    // One rank alone has no job table.
    let single = report(&root.path().join("j1").join("rank-0"));
    assert!(
        !single.iter().any(|l| l.starts_with("job of")),
        "{single:#?}"
    );
}

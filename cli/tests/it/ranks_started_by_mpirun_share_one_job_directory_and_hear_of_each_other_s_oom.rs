//! Two ranks started by the real `mpirun` (Open MPI), with no `GPUSPAN_RUN_ID` and no
//! torchrun variables: each takes its rank from Open MPI's variables and its job from
//! Open MPI's job id, so both write under one job directory (`ompi-<job id>-<key>`) and read
//! one alarm board. When rank 1's device fills, rank 0 gets `gpu.memory.peer_oom` naming
//! it, and `gpuspan report` on the run root finds the job and names rank 1 first.

use gpuspan_test_support as support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::common::v1::any_value::Value;
use support::example::{read_spans, train_binary};
use support::filling_node::FillingNode;

/// `mpirun`, or a failure that says how to get it: this test is never skipped.
fn mpirun() -> &'static str {
    match Command::new("mpirun").arg("--version").output() {
        Ok(out) if out.status.success() => "mpirun",
        Ok(out) => panic!(
            "`mpirun --version` failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ),
        Err(error) => panic!(
            "mpirun is needed to start the ranks ({error}): install Open MPI, e.g. \
             `apt-get install openmpi-bin` on Debian or Ubuntu"
        ),
    }
}

/// Every `rank-<n>/timeline.bin` under `root`, whichever directories hold them.
fn rank_timelines(root: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for run in std::fs::read_dir(root).into_iter().flatten().flatten() {
        for rank in std::fs::read_dir(run.path())
            .into_iter()
            .flatten()
            .flatten()
        {
            let timeline = rank.path().join("timeline.bin");
            let started = rank.file_name().to_string_lossy().starts_with("rank-")
                && std::fs::metadata(&timeline).is_ok_and(|m| m.len() > 0);
            if started {
                found.push(timeline);
            }
        }
    }
    found
}

fn int_attribute(
    attributes: &[opentelemetry_proto::tonic::common::v1::KeyValue],
    key: &str,
) -> Option<i64> {
    match attributes
        .iter()
        .find(|kv| kv.key == key)?
        .value
        .as_ref()?
        .value
        .as_ref()?
    {
        Value::IntValue(v) => Some(*v),
        _ => None,
    }
}

#[test]
fn both_ranks_write_under_one_job_directory_and_rank_0_hears_of_rank_1() {
    let mpirun = mpirun();
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("runs");
    let node = FillingNode::new(dir.path(), 2);
    let train = train_binary();
    let mut job = node.start(
        mpirun,
        &[
            "--allow-run-as-root",
            "--oversubscribe",
            "-np",
            "2",
            train.to_str().unwrap(),
            "--epochs",
            "2",
            "--steps",
            "150",
        ],
        &root,
        &[],
    );

    // Both ranks are training (their timelines have samples) before rank 1's device fills.
    let deadline = Instant::now() + Duration::from_secs(120);
    while rank_timelines(&root).len() < 2 {
        if Instant::now() >= deadline || job.try_wait().unwrap().is_some() {
            let _ = job.kill();
            let out = job.wait_with_output().unwrap();
            panic!(
                "the two ranks did not start: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(500));
    node.fill(1);

    let deadline = Instant::now() + Duration::from_secs(180);
    while job.try_wait().unwrap().is_none() {
        if Instant::now() >= deadline {
            let _ = job.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = job.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "mpirun: {stderr}");

    let runs: Vec<PathBuf> = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(runs.len(), 1, "one job, one directory: {runs:?}");
    let job_dir = &runs[0];
    let name = job_dir.file_name().unwrap().to_string_lossy().into_owned();
    assert!(
        name.starts_with("ompi-"),
        "named after Open MPI's job: {name}"
    );
    for rank in 0..2 {
        assert!(
            job_dir
                .join(format!("rank-{rank}"))
                .join("traces.jsonl")
                .is_file(),
            "rank {rank} writes under the job's directory"
        );
    }

    let spans = |rank: u32| read_spans(&job_dir.join(format!("rank-{rank}")));
    let near = spans(1)
        .into_iter()
        .flat_map(|s| s.events)
        .filter(|e| e.name == "gpu.memory.near_oom")
        .count();
    assert_eq!(near, 1, "rank 1's own finding");
    let told: Vec<_> = spans(0)
        .into_iter()
        .flat_map(|s| s.events)
        .filter(|e| e.name == "gpu.memory.peer_oom")
        .collect();
    assert_eq!(told.len(), 1, "rank 0 hears of rank 1; stderr: {stderr}");
    assert_eq!(int_attribute(&told[0].attributes, "ml.rank"), Some(1));
    assert_eq!(int_attribute(&told[0].attributes, "gpu.index"), Some(1));
    // mpirun passes the ranks' stderr on as it reads it, so their lines may run together.
    assert!(
        stderr.contains("gpuspan: warning: rank 1 (")
            && stderr.contains("rank 0 may now wait for it in a collective"),
        "{stderr}"
    );

    let report = Command::new(env!("CARGO_BIN_EXE_gpuspan"))
        .arg("report")
        .arg(&root)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&report.stdout);
    assert!(
        report.status.success(),
        "{}",
        String::from_utf8_lossy(&report.stderr)
    );
    assert!(
        stdout.lines().any(
            |l| l.starts_with("first near out of memory: rank 1 in step ")
                && l.ends_with("UTC); 1 of 2 ranks")
        ),
        "the report reads the job: {stdout}"
    );
}

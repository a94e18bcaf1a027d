//! One node, four ranks of one job (`RANK`, `LOCAL_RANK`, `WORLD_SIZE`), each on its own
//! device of the fake NVML. Mid-run, rank 3's device fills to 79 of its 80 GiB: rank 3
//! records `gpu.memory.near_oom`, and within a second each other rank gets
//! `gpu.memory.peer_oom` on its open span, naming rank 3, its step, peak and limit, and
//! one line on stderr. `gpuspan report` on the job names rank 3 as the first.

use gpuspan_test_support as support;

use std::path::Path;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::trace::v1::span::Event;
use opentelemetry_proto::tonic::trace::v1::Span;
use support::example::{read_spans, train_binary};
use support::filling_node::{FillingNode, FILLED};

const GIB: u64 = 1 << 30;
const RANKS: u32 = 4;

fn value<'a>(attributes: &'a [KeyValue], key: &str) -> Option<&'a Value> {
    attributes
        .iter()
        .find(|kv| kv.key == key)?
        .value
        .as_ref()?
        .value
        .as_ref()
}

fn int(attributes: &[KeyValue], key: &str) -> Option<i64> {
    match value(attributes, key)? {
        Value::IntValue(v) => Some(*v),
        _ => None,
    }
}

fn text<'a>(attributes: &'a [KeyValue], key: &str) -> Option<&'a str> {
    match value(attributes, key)? {
        Value::StringValue(v) => Some(v),
        _ => None,
    }
}

/// Every event named `name` in a rank's run directory, with the span it is on.
fn events(dir: &Path, name: &str) -> Vec<(Span, Event)> {
    read_spans(dir)
        .into_iter()
        .flat_map(|span| {
            span.events
                .clone()
                .into_iter()
                .filter(|e| e.name == name)
                .map(move |e| (span.clone(), e))
        })
        .collect()
}

fn start_rank(node: &FillingNode, root: &Path, rank: u32) -> Child {
    let rank_text = rank.to_string();
    node.start(
        train_binary(),
        &["--epochs", "2", "--steps", "150"],
        root,
        &[
            ("GPUSPAN_RUN_ID", "job"),
            ("RANK", &rank_text),
            ("LOCAL_RANK", &rank_text),
            ("WORLD_SIZE", &RANKS.to_string()),
        ],
    )
}

#[test]
fn every_other_rank_is_told_within_a_second_on_its_open_span_and_on_stderr() {
    let root = tempfile::tempdir().unwrap();
    let node = FillingNode::new(root.path(), RANKS);
    let ranks: Vec<Child> = (0..RANKS)
        .map(|r| start_rank(&node, root.path(), r))
        .collect();
    let job = root.path().join("job");

    // Every rank is training (its timeline has samples) before rank 3's device fills.
    let deadline = Instant::now() + Duration::from_secs(60);
    while !(0..RANKS).all(|r| {
        std::fs::metadata(job.join(format!("rank-{r}")).join("timeline.bin"))
            .is_ok_and(|m| m.len() > 0)
    }) {
        assert!(Instant::now() < deadline, "the ranks did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_millis(500));
    node.fill(3);

    let outputs: Vec<_> = ranks
        .into_iter()
        .map(|child| child.wait_with_output().unwrap())
        .collect();
    for (rank, out) in outputs.iter().enumerate() {
        assert!(
            out.status.success(),
            "rank {rank}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    let near = events(&job.join("rank-3"), "gpu.memory.near_oom");
    assert_eq!(near.len(), 1, "rank 3's own finding");
    let (near_span, near_event) = &near[0];
    let step = int(&near_span.attributes, "ml.step");
    assert!(step.is_some(), "rank 3 was in a step: {}", near_span.name);
    assert!(
        events(&job.join("rank-3"), "gpu.memory.peer_oom").is_empty(),
        "a rank is not told of itself"
    );

    for (rank, out) in outputs.iter().enumerate().take(3) {
        let told = events(&job.join(format!("rank-{rank}")), "gpu.memory.peer_oom");
        assert_eq!(told.len(), 1, "rank {rank}");
        let (span, event) = &told[0];
        assert!(
            ["epoch", "step"].contains(&span.name.as_str()),
            "on an open span of the training: {}",
            span.name
        );
        assert!(span.start_time_unix_nano <= event.time_unix_nano);
        assert!(event.time_unix_nano <= span.end_time_unix_nano);
        let late = event.time_unix_nano as i64 - near_event.time_unix_nano as i64;
        assert!(
            (0..1_000_000_000).contains(&late),
            "rank {rank} was told {late} ns after rank 3's finding"
        );
        let a = &event.attributes;
        assert_eq!(int(a, "ml.rank"), Some(3));
        assert_eq!(int(a, "ml.step"), step);
        assert_eq!(int(a, "gpu.index"), Some(3));
        assert_eq!(int(a, "gpu.memory.peak"), Some(FILLED as i64));
        assert_eq!(int(a, "gpu.memory.limit"), Some((80 * GIB) as i64));
        assert_eq!(
            text(a, "gpu.memory.peer.finding"),
            Some("gpu.memory.near_oom")
        );

        let stderr = String::from_utf8_lossy(&out.stderr);
        let lines: Vec<&str> = stderr.lines().filter(|l| l.contains("rank 3")).collect();
        assert_eq!(lines.len(), 1, "rank {rank}'s stderr: {stderr}");
        assert!(
            lines[0].starts_with("gpuspan: warning: rank 3 (")
                && lines[0].contains(&format!(
                    "came near the end of its device memory at step {} of epoch ",
                    step.unwrap()
                ))
                && lines[0].ends_with(&format!(
                    "(gpu 3: 79.0 GiB peak of 80.0 GiB); rank {rank} may now wait for it in a \
                     collective"
                )),
            "{}",
            lines[0]
        );
    }

    let report = Command::new(env!("CARGO_BIN_EXE_gpuspan"))
        .arg("report")
        .arg(&job)
        .output()
        .unwrap();
    assert!(report.status.success());
    let stdout = String::from_utf8_lossy(&report.stdout);
    let first = stdout
        .lines()
        .find(|l| l.starts_with("first near out of memory"))
        .unwrap_or_else(|| panic!("{stdout}"));
    assert!(
        first.starts_with(&format!(
            "first near out of memory: rank 3 in step {} (",
            step.unwrap()
        )) && first.ends_with("UTC); 1 of 4 ranks"),
        "{first}"
    );
}

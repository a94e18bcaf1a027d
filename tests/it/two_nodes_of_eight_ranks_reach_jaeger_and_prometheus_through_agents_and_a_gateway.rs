//! The scale path run for real: two simulated nodes, each a fake NVML with 8 devices, its own
//! `host.name` and an OpenTelemetry Collector agent (collector/agent.yaml), 8 ranks each (16
//! in all, `train` with RANK / LOCAL_RANK / WORLD_SIZE), one gateway (collector/gateway.yaml)
//! sending to Jaeger, to a second trace backend (an in-process OTLP receiver standing where
//! Tempo would) and to its Prometheus exporter. The gateway is killed for 2 s mid-run.
//!
//! Read back exactly: every epoch and step span of every rank arrives once in Jaeger and
//! once in the second backend; the resource says the host, rank and job; each rank's step
//! peaks and its gauge are its own device's memory.

use gpuspan_test_support as support;

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use support::example::train_command;
use support::fake_nvml::FakeNvml;
use support::go_stack::{Collector, Jaeger};
use support::prometheus_text::named;
use support::receiver::Receiver;

const NODES: u32 = 2;
const RANKS_PER_NODE: u32 = 8;
const EPOCHS: u32 = 4;
const STEPS: u32 = 25;
const JOB: &str = "job-7";
const SERVICE: &str = "train-job";
const MIB: i64 = 1 << 20;

fn node_name(node: u32) -> String {
    format!("node-{}", ["a", "b"][node as usize])
}

/// Device memory of `device` on `node`: every rank's is different.
fn device_bytes(node: u32, device: u32) -> i64 {
    (1000 * i64::from(node + 1) + 100 * i64::from(device)) * MIB
}

fn start_rank(fake: &FakeNvml, root: &Path, node: u32, local: u32, agent: &Collector) -> Child {
    let live = root.join(format!("{}.gpu", node_name(node)));
    let rank = node * RANKS_PER_NODE + local;
    let pairs = [
        ("GPUSPAN_NVML_LIB", fake.path().to_str().unwrap().to_owned()),
        ("FAKE_NVML_DEVICES", RANKS_PER_NODE.to_string()),
        ("FAKE_NVML_TOTAL_MIB", "81920".to_owned()),
        ("FAKE_NVML_LIVE_FILE", live.to_str().unwrap().to_owned()),
        (
            "GPUSPAN_RUN_DIR",
            root.join("runs").to_str().unwrap().to_owned(),
        ),
        ("GPUSPAN_RUN_ID", JOB.to_owned()),
        ("GPUSPAN_JOB_ID", JOB.to_owned()),
        ("RANK", rank.to_string()),
        ("LOCAL_RANK", local.to_string()),
        ("WORLD_SIZE", (NODES * RANKS_PER_NODE).to_string()),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", agent.otlp_endpoint("grpc")),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc".to_owned()),
        ("OTEL_SERVICE_NAME", SERVICE.to_owned()),
        (
            "OTEL_RESOURCE_ATTRIBUTES",
            format!("host.name={}", node_name(node)),
        ),
        ("OTEL_METRIC_EXPORT_INTERVAL", "1000".to_owned()),
    ];
    let envs: Vec<(&str, &str)> = pairs.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let args = [
        "--epochs".to_owned(),
        EPOCHS.to_string(),
        "--steps".to_owned(),
        STEPS.to_string(),
        "--hidden".to_owned(),
        "64".to_owned(),
    ];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    train_command(&args, &envs)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("train starts")
}

#[test]
fn every_span_of_sixteen_ranks_arrives_once_across_a_gateway_restart() {
    let fake = FakeNvml::build();
    let root = tempfile::tempdir().unwrap();
    for node in 0..NODES {
        let lines: String = (0..RANKS_PER_NODE)
            .map(|d| format!("used {d} {}\n", device_bytes(node, d)))
            .collect();
        std::fs::write(root.path().join(format!("{}.gpu", node_name(node))), lines).unwrap();
    }
    let mut jaeger = Jaeger::start(root.path());
    let tempo = Receiver::start_grpc();
    let mut gateway = Collector::start_gateway(
        root.path(),
        &jaeger.otlp_endpoint(),
        &format!("127.0.0.1:{}", tempo.port()),
    );
    let agents: Vec<Collector> = (0..NODES)
        .map(|node| Collector::start_agent(root.path(), &gateway, &node_name(node)))
        .collect();

    let started = Instant::now();
    let mut ranks: Vec<Child> = (0..NODES)
        .flat_map(|node| (0..RANKS_PER_NODE).map(move |local| (node, local)))
        .map(|(node, local)| start_rank(&fake, root.path(), node, local, &agents[node as usize]))
        .collect();

    // Mid-run, the gateway goes away for 2 s: the agents queue and retry.
    std::thread::sleep(Duration::from_millis(1500));
    let running = ranks
        .iter_mut()
        .map(|r| r.try_wait().unwrap().is_none())
        .filter(|&running| running)
        .count();
    assert!(running > 0, "every rank ended before the gateway stopped");
    gateway.stop();
    let outage = Instant::now();
    std::thread::sleep(Duration::from_secs(2));
    gateway.restart();
    eprintln!(
        "gateway down {:?}, {running} of 16 ranks running when it stopped",
        outage.elapsed()
    );

    for (rank, child) in ranks.into_iter().enumerate() {
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "rank {rank}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    eprintln!("the ranks trained for {:?}", started.elapsed());

    let ranks = NODES * RANKS_PER_NODE;
    let expected = (ranks * (EPOCHS + EPOCHS * STEPS)) as usize;
    let is_training = |operation: &str| operation == "epoch" || operation == "step";
    let spans = jaeger.wait_for_spans(SERVICE, Duration::from_secs(120), |spans| {
        spans.iter().filter(|s| is_training(&s.operation)).count() >= expected
    });
    let training: Vec<_> = spans.iter().filter(|s| is_training(&s.operation)).collect();
    let ids: BTreeSet<(&str, &str)> = training
        .iter()
        .map(|s| (s.trace_id.as_str(), s.span_id.as_str()))
        .collect();
    eprintln!(
        "jaeger holds {} epoch and step spans ({} distinct) of {expected}",
        training.len(),
        ids.len()
    );
    assert_eq!(training.len(), expected, "{}", gateway.log_tail());
    assert_eq!(ids.len(), expected, "a span arrived twice");

    let mut per_rank: BTreeMap<(String, i64), (u32, u32)> = BTreeMap::new();
    for span in &training {
        let host = span.process_str("host.name").unwrap_or_default().to_owned();
        let rank = span
            .process_int("ml.rank")
            .expect("ml.rank on the resource");
        assert_eq!(span.process_str("ml.job.id"), Some(JOB));
        let node = u32::try_from(rank).unwrap() / RANKS_PER_NODE;
        let local = u32::try_from(rank).unwrap() % RANKS_PER_NODE;
        assert_eq!(host, node_name(node), "rank {rank}'s host");
        assert_eq!(span.process_int("ml.local_rank"), Some(i64::from(local)));
        assert_eq!(
            span.int_tag("gpu.memory.peak"),
            Some(device_bytes(node, local)),
            "rank {rank}'s {} carries its own device's memory",
            span.operation
        );
        let counts = per_rank.entry((host, rank)).or_default();
        if span.operation == "epoch" {
            counts.0 += 1;
        } else {
            counts.1 += 1;
        }
    }
    assert_eq!(per_rank.len(), ranks as usize, "{per_rank:?}");
    assert!(
        per_rank.values().all(|&c| c == (EPOCHS, EPOCHS * STEPS)),
        "{per_rank:?}"
    );

    // The second trace backend got the same spans, once each.
    let second = tempo.wait_for_spans(
        |spans| spans.iter().filter(|s| is_training(&s.name)).count() >= expected,
        Duration::from_secs(60),
    );
    let second: Vec<_> = second.iter().filter(|s| is_training(&s.name)).collect();
    let second_ids: BTreeSet<&str> = second.iter().map(|s| s.span_id.as_str()).collect();
    assert_eq!((second.len(), second_ids.len()), (expected, expected));

    // Each rank's gauge, labelled with its host, rank and job, is its own device's.
    let samples = gateway.wait_for_samples(Duration::from_secs(60), |samples| {
        named(samples, "hw_gpu_memory_usage_bytes")
            .iter()
            .filter(|s| s.labels.get("ml_job_id").map(String::as_str) == Some(JOB))
            .count()
            >= ranks as usize
    });
    let gauges: Vec<_> = named(&samples, "hw_gpu_memory_usage_bytes")
        .into_iter()
        .filter(|s| s.labels.get("ml_job_id").map(String::as_str) == Some(JOB))
        .collect();
    let mut seen = BTreeSet::new();
    for sample in &gauges {
        let rank: u32 = sample.labels["ml_rank"].parse().unwrap();
        let (node, local) = (rank / RANKS_PER_NODE, rank % RANKS_PER_NODE);
        assert_eq!(sample.labels["host_name"], node_name(node), "{sample:?}");
        assert_eq!(sample.labels["gpu_index"], local.to_string(), "{sample:?}");
        assert_eq!(sample.value as i64, device_bytes(node, local), "{sample:?}");
        seen.insert(rank);
    }
    assert_eq!(seen.len(), ranks as usize, "{gauges:?}");
    drop(agents);
}

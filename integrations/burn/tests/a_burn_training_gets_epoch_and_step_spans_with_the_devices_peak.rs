//! Real burn trainings on burn's CPU backend, with the fake NVML behind the real
//! nvml-wrapper, each in a process of its own (a program owns its global subscriber):
//! - exact span counts, burn's numbers, each step's peak the fake device's spike in it;
//! - a reading over the memory budget stops training through burn's interrupter at the
//!   end of that step;
//! - burn's experiment log still written, as burn writes it;
//! - the `burn_train` example, run as a user runs it;
//! - the leak rules and the summary table on burn's epochs;
//! - a subscriber installed first is a clear error;
//! - on burn's wgpu backend (CubeCL, on Mesa's software Vulkan), each step's allocator
//!   figures are the pool the backend reports.

use gpuspan_test_support as support;

use std::path::Path;
use std::process::Output;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use burn::data::dataloader::batcher::Batcher;
use burn::data::dataloader::DataLoaderBuilder;
use burn::data::dataset::InMemDataset;
use burn::module::{Module, Param};
use burn::optim::{ModuleOptimizer, SgdConfig};
use burn::tensor::{Device, Distribution, Tensor};
use burn::train::{
    InferenceStep, Learner, RegressionOutput, SupervisedTraining, TrainOutput, TrainStep,
};
use opentelemetry_proto::tonic::trace::v1::Span;
use support::example::{clean_command, example_binary, int, read_spans};
use support::fake_nvml::{FakeNvml, MIB};

/// The variable that makes the ignored test below the training of one case.
const CASE: &str = "GPUSPAN_BURN_TEST_CASE";
/// The variable that gives it burn's artifact directory.
const ARTIFACTS: &str = "GPUSPAN_BURN_TEST_ARTIFACTS";
const EPOCHS: usize = 3;
/// 8 samples in batches of 2.
const ITERATIONS: u64 = 4;
const BASE: u64 = 1000 * MIB;
const TOTAL: u64 = 80 * 1024 * MIB;
/// The step (counted from 0 over the run) that goes over the budget in the budget case.
const OVER_BUDGET_STEP: u64 = 5;
const BUDGET: &str = "4GiB";

/// Device memory at the height of training step `n` (0-based over the whole run).
fn spike(case: &str, n: u64) -> u64 {
    if case == "budget" && n == OVER_BUDGET_STEP {
        5000 * MIB
    } else {
        (2000 + 10 * n) * MIB
    }
}

/// Device memory between the spikes of step `n`: in the leak case, each epoch keeps 600 MiB
/// more than the one before.
fn base(case: &str, n: u64) -> u64 {
    if case == "leak" {
        BASE + n / ITERATIONS * 600 * MIB
    } else {
        BASE
    }
}

/// What the child's train steps reach for: the fake, the case, and the device whose
/// allocator they read.
struct Script {
    fake: FakeNvml,
    case: String,
    steps: AtomicU64,
    device: Device,
    /// The allocator's (in use, reserved) bytes as each train step starts.
    pools: Mutex<Vec<(u64, u64)>>,
}

static SCRIPT: OnceLock<Arc<Script>> = OnceLock::new();

impl Script {
    /// Raises the device to this step's spike until the sampler has read it, then frees it
    /// and waits for the sampler to read that too, so the step ends at the base.
    fn spike(&self) {
        if let Some(pool) = self.device.memory_pool_usage() {
            let mut pools = self.pools.lock().unwrap();
            pools.push((pool.bytes_in_use, pool.bytes_reserved));
        }
        let n = self.steps.fetch_add(1, Ordering::SeqCst);
        self.fake.set_memory(0, spike(&self.case, n), TOTAL);
        self.wait_reads(3);
        self.fake.set_memory(0, base(&self.case, n), TOTAL);
        self.wait_reads(3);
    }

    /// Waits until the sampler has read the device `reads` more times: after the second,
    /// every observer has seen the first.
    fn wait_reads(&self, reads: u64) {
        let calls = || self.fake.call_count("nvmlDeviceGetMemoryInfo_v2");
        let target = calls() + reads;
        let deadline = Instant::now() + Duration::from_secs(10);
        while calls() < target {
            assert!(Instant::now() < deadline, "the sampler stopped reading");
            std::thread::sleep(Duration::from_micros(200));
        }
    }
}

#[derive(Module, Debug)]
struct Toy {
    weight: Param<Tensor<2>>,
}

#[derive(Clone, Debug)]
struct Batch {
    target: Tensor<2>,
}

struct Batches;

impl Batcher<(), Batch> for Batches {
    fn batch(&self, _items: Vec<()>, device: &Device) -> Batch {
        Batch {
            target: Tensor::zeros([1, 2], device),
        }
    }
}

impl Toy {
    fn regress(&self, batch: Batch) -> RegressionOutput {
        let output = self.weight.val();
        let loss = output
            .clone()
            .sub(batch.target.clone())
            .powi_scalar(2)
            .mean();
        RegressionOutput::new(loss, output, batch.target)
    }
}

impl TrainStep for Toy {
    type Input = Batch;
    type Output = RegressionOutput;

    fn step(&self, batch: Batch) -> TrainOutput<RegressionOutput> {
        if let Some(script) = SCRIPT.get() {
            script.spike();
        }
        let output = self.regress(batch);
        TrainOutput::new(self, output.loss.backward(), output)
    }
}

impl InferenceStep for Toy {
    type Input = Batch;
    type Output = RegressionOutput;

    fn step(&self, batch: Batch) -> RegressionOutput {
        self.regress(batch)
    }
}

#[test]
#[ignore = "one training, run by the tests of this file in a process of its own"]
fn training() {
    let case = std::env::var(CASE).expect("started by the tests of this file, with its case");
    let artifacts = std::env::var(ARTIFACTS).expect("started with burn's artifact directory");
    let fake = FakeNvml::build();
    fake.set_memory(0, BASE, TOTAL);
    let builder = gpuspan::Telemetry::builder()
        .nvml_lib(fake.path())
        .sample_interval(Duration::from_millis(1));
    if case == "taken" {
        // A program that installed its own subscriber first.
        tracing::subscriber::set_global_default(tracing_subscriber::registry()).unwrap();
        let error = gpuspan_burn::Gpuspan::with_builder(builder, &artifacts).unwrap_err();
        println!("error: {error}");
        return;
    }
    // burn's wgpu backend, on Mesa's software Vulkan here: a CubeCL backend whose
    // allocator reports its pool.
    let device = match case.as_str() {
        "wgpu" => Device::wgpu(Default::default()).autodiff(),
        _ => Device::flex().autodiff(),
    };
    let script = Arc::new(Script {
        fake,
        case,
        steps: AtomicU64::new(0),
        device: device.clone(),
        pools: Mutex::new(Vec::new()),
    });
    let _ = SCRIPT.set(Arc::clone(&script));
    let gpuspan = gpuspan_burn::Gpuspan::with_builder(builder, &artifacts).unwrap();

    let loader = || {
        DataLoaderBuilder::new(Batches)
            .batch_size(2)
            .build(InMemDataset::new(vec![(); 2 * ITERATIONS as usize]))
    };
    let model = Toy {
        weight: Param::from_tensor(Tensor::random([1, 2], Distribution::Default, &device)),
    };
    let optimizer: ModuleOptimizer = SgdConfig::new().init();
    let learner = Learner::new(model, optimizer, 1e-3);
    let training = SupervisedTraining::new(&artifacts, loader(), loader()).num_epochs(EPOCHS);

    let result = gpuspan.launch(training, learner);

    assert!(result.error.is_none(), "{:?}", result.error);
    for (n, (in_use, reserved)) in script.pools.lock().unwrap().iter().enumerate() {
        println!("pool at step {n}: {in_use} {reserved}");
    }
    if let Some(interruption) = result.interrupted {
        println!("interrupted: {}", interruption.reason.unwrap_or_default());
    }
    gpuspan.shutdown().unwrap();
}

/// Runs the training of `case` in a process of its own; `envs` on top.
fn train(case: &str, root: &Path, envs: &[(&str, &str)]) -> Output {
    let args = [
        "training",
        "--exact",
        "--ignored",
        "--nocapture",
        "--test-threads=1",
    ];
    let output = clean_command(std::env::current_exe().unwrap(), &args, envs)
        .env(CASE, case)
        .env(ARTIFACTS, root.join("artifacts"))
        .env("GPUSPAN_RUN_DIR", root.join("runs"))
        .env("GPUSPAN_RUN_ID", case)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "the training failed:\n{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

fn named<'a>(spans: &'a [Span], name: &str) -> Vec<&'a Span> {
    let mut named: Vec<&Span> = spans.iter().filter(|s| s.name == name).collect();
    named.sort_by_key(|s| s.start_time_unix_nano);
    named
}

/// The epoch span a span sits in, by its burn number.
fn epoch_of(epochs: &[&Span], span: &Span) -> i64 {
    let parent = epochs
        .iter()
        .find(|e| e.span_id == span.parent_span_id)
        .expect("each step and validation span is a child of an epoch span");
    int(parent, "ml.epoch").unwrap()
}

fn event_int(span: &Span, event: &str, key: &str) -> Option<i64> {
    let event = span.events.iter().find(|e| e.name == event)?;
    let value = event.attributes.iter().find(|kv| kv.key == key)?;
    match value.value.as_ref()?.value.as_ref()? {
        opentelemetry_proto::tonic::common::v1::any_value::Value::IntValue(v) => Some(*v),
        _ => None,
    }
}

#[test]
fn every_epoch_and_iteration_is_a_span_with_the_devices_peak_in_it_and_burns_log_is_kept() {
    let root = tempfile::tempdir().unwrap();
    let output = train("plain", root.path(), &[]);
    let spans = read_spans(&root.path().join("runs").join("plain"));

    let epochs = named(&spans, "epoch");
    let numbers: Vec<i64> = epochs.iter().map(|e| int(e, "ml.epoch").unwrap()).collect();
    assert_eq!(numbers, vec![1, 2, 3], "burn counts epochs from 1");

    let steps = named(&spans, "step");
    assert_eq!(steps.len(), EPOCHS * ITERATIONS as usize);
    for (n, step) in steps.iter().enumerate() {
        let n = n as u64;
        let (epoch, iteration) = (n / ITERATIONS + 1, n % ITERATIONS + 1);
        assert_eq!(epoch_of(&epochs, step), epoch as i64, "step {n}");
        assert_eq!(int(step, "ml.step"), Some(iteration as i64), "step {n}");
        assert_eq!(
            int(step, "gpu.memory.peak"),
            Some(spike("plain", n) as i64),
            "step {n}"
        );
        assert_eq!(int(step, "gpu.memory.start"), Some(BASE as i64), "step {n}");
        assert_eq!(int(step, "gpu.memory.end"), Some(BASE as i64), "step {n}");
        assert_eq!(
            int(step, "gpu.allocator.reserved.peak"),
            None,
            "burn's CPU backend reports no allocator: nothing is made up"
        );
    }
    for epoch in &epochs {
        let highest = spike(
            "plain",
            int(epoch, "ml.epoch").unwrap() as u64 * ITERATIONS - 1,
        );
        assert_eq!(int(epoch, "gpu.memory.peak"), Some(highest as i64));
    }

    let validations = named(&spans, "validation");
    assert_eq!(validations.len(), EPOCHS);
    for (i, validation) in validations.iter().enumerate() {
        assert_eq!(epoch_of(&epochs, validation), i as i64 + 1);
        assert_eq!(int(validation, "gpu.memory.peak"), Some(BASE as i64));
    }

    let log = std::fs::read_to_string(root.path().join("artifacts/experiment.log")).unwrap();
    assert_eq!(log.matches(": Iteration ").count(), steps.len(), "{log}");
    assert!(
        log.lines().any(|line| line.ends_with(
            " INFO burn_train::learner::supervised::strategies::single::epoch: Iteration 4"
        )),
        "burn's lines read as burn writes them:\n{log}"
    );
    assert!(
        log.contains("Executing validation step for epoch 3"),
        "{log}"
    );

    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(!stdout.contains("interrupted"), "{stdout}");
}

#[test]
fn a_reading_over_the_budget_stops_burns_training_at_the_end_of_that_step() {
    let root = tempfile::tempdir().unwrap();
    let output = train(
        "budget",
        root.path(),
        &[
            ("GPUSPAN_MEMORY_BUDGET", BUDGET),
            ("GPUSPAN_MEMORY_BUDGET_STOP", "true"),
        ],
    );
    let reason = "gpuspan: gpu 0 reached 4.9 GiB, over the memory budget of 4.0 GiB \
                  (GPUSPAN_MEMORY_BUDGET_STOP)";
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains(&format!("interrupted: {reason}")),
        "burn's result says why:\n{stdout}"
    );

    let spans = read_spans(&root.path().join("runs").join("budget"));
    let epochs = named(&spans, "epoch");
    assert_eq!(epochs.len(), 2);
    let steps = named(&spans, "step");
    let last = OVER_BUDGET_STEP as usize;
    assert_eq!(
        steps.len(),
        last + 1,
        "training ends with the step over the budget"
    );
    let over = steps[last];
    assert_eq!(
        (epoch_of(&epochs, over), int(over, "ml.step")),
        (2, Some(2))
    );
    assert_eq!(int(over, "gpu.memory.peak"), Some((5000 * MIB) as i64));
    let event = "gpu.memory.budget_exceeded";
    assert_eq!(
        event_int(over, event, "gpu.memory.peak"),
        Some((5000 * MIB) as i64)
    );
    assert_eq!(event_int(over, event, "gpu.memory.budget"), Some(4 << 30));
    for step in &steps[..last] {
        assert!(step.events.iter().all(|e| e.name != event));
    }
    assert_eq!(
        named(&spans, "validation").len(),
        1,
        "epoch 2 is not validated"
    );

    let log = std::fs::read_to_string(root.path().join("artifacts/experiment.log")).unwrap();
    assert!(
        log.contains(&format!("Training interrupted: {reason}")),
        "burn's log says why:\n{log}"
    );
}

#[test]
fn on_a_cubecl_backend_each_step_carries_the_allocators_pool_at_its_edges() {
    let drivers = ["/usr/share/vulkan/icd.d", "/etc/vulkan/icd.d"];
    assert!(
        drivers
            .iter()
            .any(|dir| std::fs::read_dir(dir).is_ok_and(|mut d| d.next().is_some())),
        "burn's wgpu backend needs a Vulkan driver: Mesa's software one is Debian's \
         mesa-vulkan-drivers (what .ci/run installs)"
    );
    let root = tempfile::tempdir().unwrap();
    let output = train("wgpu", root.path(), &[]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    // (in use, reserved) as each train step started, read by the step itself.
    let pools: Vec<(i64, i64)> = stdout
        .lines()
        .filter_map(|line| line.strip_prefix("pool at step "))
        .map(|rest| {
            let figures: Vec<i64> = rest
                .split_whitespace()
                .skip(1)
                .map(|f| f.parse().unwrap())
                .collect();
            (figures[0], figures[1])
        })
        .collect();
    assert_eq!(pools.len(), EPOCHS * ITERATIONS as usize, "{stdout}");
    assert!(pools.iter().all(|&(_, reserved)| reserved > 0), "{pools:?}");

    let spans = read_spans(&root.path().join("runs").join("wgpu"));
    let steps = named(&spans, "step");
    assert_eq!(steps.len(), pools.len());
    for (n, step) in steps.iter().enumerate() {
        let allocated = int(step, "gpu.allocator.allocated.peak");
        let reserved = int(step, "gpu.allocator.reserved.peak");
        assert!(allocated.is_some() && reserved.is_some(), "step {n}");
        // Read at its start and at the next one's (within an epoch, where no other work
        // comes between). The pool only grows, so its reserved peak is exact. The device
        // runs behind the host and frees as it catches up, so the bytes in use read at a
        // span's edge are at least what the step read a moment later, and never above the
        // pool.
        if !(n as u64 + 1).is_multiple_of(ITERATIONS) {
            let (now, next) = (pools[n], pools[n + 1]);
            assert_eq!(reserved, Some(now.1.max(next.1)), "step {n}");
            let allocated = allocated.unwrap();
            assert!(
                allocated >= now.0.max(next.0) && allocated <= next.1,
                "step {n}: {allocated} in use against {now:?} and {next:?}"
            );
        }
    }
}

#[test]
fn the_leak_rules_and_the_summary_read_burns_epochs() {
    let root = tempfile::tempdir().unwrap();
    let output = train("leak", root.path(), &[("GPUSPAN_LEAK_WARMUP", "0")]);
    let spans = read_spans(&root.path().join("runs").join("leak"));
    let epochs = named(&spans, "epoch");
    let ends: Vec<Option<i64>> = epochs.iter().map(|e| int(e, "gpu.memory.end")).collect();
    let mib = |m: u64| Some((m * MIB) as i64);
    assert_eq!(ends, vec![mib(1000), mib(1600), mib(2200)]);
    let leaks: Vec<i64> = epochs
        .iter()
        .filter(|e| {
            e.events
                .iter()
                .any(|ev| ev.name == "gpu.memory.leak_suspected")
        })
        .map(|e| int(e, "ml.epoch").unwrap())
        .collect();
    assert_eq!(
        leaks,
        vec![2],
        "1600 MiB is 1.6 times the first epoch's end"
    );

    let summary = String::from_utf8_lossy(&output.stderr);
    let rows: Vec<&str> = summary
        .lines()
        .filter(|line| line.trim_start().starts_with(['1', '2', '3']))
        .collect();
    assert_eq!(rows.len(), 3, "one summary row per burn epoch:\n{summary}");
    assert!(rows
        .iter()
        .all(|row| row.split_whitespace().nth(1) == Some("4")));
    assert!(rows[1].contains("leak? ratio"), "{summary}");
}

#[test]
fn a_subscriber_set_first_is_a_clear_error() {
    let root = tempfile::tempdir().unwrap();
    let output = train("taken", root.path(), &[]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains(
            "error: a global tracing subscriber is already set: call Gpuspan::init before \
             anything installs one"
        ),
        "{stdout}"
    );
}

#[test]
fn the_burn_train_example_records_its_epochs_and_steps_as_a_user_runs_it() {
    let root = tempfile::tempdir().unwrap();
    let fake = FakeNvml::build();
    let example = example_binary("burn_train");
    let artifacts = root.path().join("artifacts");
    let envs = [
        ("FAKE_NVML_USED_MIB", "3072"),
        ("GPUSPAN_RUN_ID", "example"),
    ];
    let output = clean_command(&example, &["2", artifacts.to_str().unwrap()], &envs)
        .current_dir(root.path())
        .env("GPUSPAN_NVML_LIB", fake.path())
        .output()
        .unwrap_or_else(|e| panic!("{} runs: {e}", example.display()));
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );

    let spans = read_spans(&root.path().join("gpuspan-runs").join("example"));
    assert_eq!(named(&spans, "epoch").len(), 2);
    let steps = named(&spans, "step");
    assert_eq!(steps.len(), 2 * 16, "256 samples in batches of 16, twice");
    assert!(steps
        .iter()
        .all(|s| int(s, "gpu.memory.peak") == Some((3072 * MIB) as i64)));
    assert!(root.path().join("artifacts/experiment.log").exists());
    let summary = String::from_utf8_lossy(&output.stderr);
    assert!(summary.contains("gpuspan: run example"), "{summary}");
}

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

mod every_step_carries_the_devices_peak_and_the_allocators_pool;
mod the_budget_and_the_leak_rules_act_on_burns_epochs;
mod the_example_runs_as_a_user_runs_it_and_a_taken_subscriber_is_named;

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

//! A small regression network on synthetic data, in plain burn: what the example trains
//! and what the iteration benchmark times.

use std::sync::Arc;

use burn::data::dataloader::batcher::Batcher;
use burn::data::dataloader::{DataLoader, DataLoaderBuilder};
use burn::data::dataset::InMemDataset;
use burn::module::Module;
use burn::nn::loss::{MseLoss, Reduction};
use burn::nn::{Linear, LinearConfig, Relu};
use burn::optim::{AdamConfig, ModuleOptimizer};
use burn::tensor::{Device, Tensor, TensorData};
use burn::train::{InferenceStep, Learner, RegressionOutput, TrainOutput, TrainStep};

/// Two linear layers: `features` inputs, `hidden` units, one output.
#[derive(Module, Debug)]
pub struct Regressor {
    hidden: Linear,
    relu: Relu,
    out: Linear,
}

impl Regressor {
    pub fn new(features: usize, hidden: usize, device: &Device) -> Self {
        Self {
            hidden: LinearConfig::new(features, hidden).init(device),
            relu: Relu::new(),
            out: LinearConfig::new(hidden, 1).init(device),
        }
    }

    fn regress(&self, batch: Batch) -> RegressionOutput {
        let output = self
            .out
            .forward(self.relu.forward(self.hidden.forward(batch.inputs)));
        let loss = MseLoss::new().forward(output.clone(), batch.targets.clone(), Reduction::Mean);
        RegressionOutput::new(loss, output, batch.targets)
    }
}

impl TrainStep for Regressor {
    type Input = Batch;
    type Output = RegressionOutput;

    fn step(&self, batch: Batch) -> TrainOutput<RegressionOutput> {
        let output = self.regress(batch);
        TrainOutput::new(self, output.loss.backward(), output)
    }
}

impl InferenceStep for Regressor {
    type Input = Batch;
    type Output = RegressionOutput;

    fn step(&self, batch: Batch) -> RegressionOutput {
        self.regress(batch)
    }
}

/// One synthetic sample: the target is the sum of the inputs.
#[derive(Clone, Debug)]
pub struct Sample(Vec<f32>);

#[derive(Clone, Debug)]
pub struct Batch {
    inputs: Tensor<2>,
    targets: Tensor<2>,
}

struct Batches;

impl Batcher<Sample, Batch> for Batches {
    fn batch(&self, samples: Vec<Sample>, device: &Device) -> Batch {
        let (n, features) = (samples.len(), samples.first().map_or(0, |s| s.0.len()));
        let targets: Vec<f32> = samples.iter().map(|s| s.0.iter().sum()).collect();
        let inputs: Vec<f32> = samples.into_iter().flat_map(|s| s.0).collect();
        Batch {
            inputs: Tensor::from_data(TensorData::new(inputs, [n, features]), device),
            targets: Tensor::from_data(TensorData::new(targets, [n, 1]), device),
        }
    }
}

/// `count` samples of `features` inputs from a fixed pseudo-random sequence.
fn samples(count: usize, features: usize, seed: u32) -> Vec<Sample> {
    let mut state = seed;
    let mut next = move || {
        state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
        (state >> 8) as f32 / (1 << 24) as f32
    };
    (0..count)
        .map(|_| Sample((0..features).map(|_| next()).collect()))
        .collect()
}

/// `count` synthetic samples in batches of `batch`.
pub fn loader(
    count: usize,
    features: usize,
    batch: usize,
    seed: u32,
) -> Arc<dyn DataLoader<Batch>> {
    DataLoaderBuilder::new(Batches)
        .batch_size(batch)
        .build(InMemDataset::new(samples(count, features, seed)))
}

/// A learner for a fresh regressor, with Adam.
pub fn learner(features: usize, hidden: usize, device: &Device) -> Learner<Regressor> {
    let optimizer: ModuleOptimizer = AdamConfig::new().init();
    Learner::new(Regressor::new(features, hidden, device), optimizer, 1e-2)
}

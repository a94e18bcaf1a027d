//! A burn training program with gpuspan: a small regression network on synthetic data, on
//! burn's CPU backend, its epochs, steps and validation passes as spans.
//!
//! ```text
//! cargo run -p gpuspan-burn --example burn_train -- [epochs] [artifact dir]
//! gpuspan report gpuspan-runs/latest
//! ```
//!
//! The two lines gpuspan adds are marked; everything else is plain burn. On a GPU, train on
//! `Device::cuda(0).autodiff()` (burn's `cuda` feature) instead of the CPU.

mod regressor;

use burn::tensor::Device;
use burn::train::metric::LossMetric;
use burn::train::SupervisedTraining;

const FEATURES: usize = 8;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let epochs: usize = args.next().map_or(Ok(3), |a| a.parse())?;
    let artifacts = args.next().unwrap_or_else(|| "burn-artifacts".to_owned());

    let gpuspan = gpuspan_burn::Gpuspan::init(&artifacts)?; // gpuspan, line 1 of 2

    let device = Device::flex().autodiff();
    let training = SupervisedTraining::new(
        &artifacts,
        regressor::loader(256, FEATURES, 16, 7),
        regressor::loader(64, FEATURES, 16, 11),
    )
    .num_epochs(epochs)
    .metric_train_numeric(LossMetric::new())
    .metric_valid_numeric(LossMetric::new());
    let learner = regressor::learner(FEATURES, 32, &device);

    let result = gpuspan.launch(training, learner); // gpuspan, line 2 of 2

    if let Some(error) = result.error {
        return Err(format!("training failed: {error}").into());
    }
    if let Some(interruption) = result.interrupted {
        eprintln!(
            "training stopped early: {}",
            interruption.reason.as_deref().unwrap_or("no reason given")
        );
    }
    gpuspan.shutdown()?;
    Ok(())
}

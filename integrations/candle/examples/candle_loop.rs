//! A candle training loop with gpuspan: candle has no trainer, so the loop is the user's,
//! and `epoch_span!` and `step_span!` wrap it as they wrap any loop. A small regression
//! network on synthetic data, on the CPU (or the first GPU with candle's `cuda` feature and
//! `Device::cuda_if_available(0)`).
//!
//! ```text
//! cargo run -p gpuspan-candle-example --example candle_loop -- [epochs]
//! gpuspan report gpuspan-runs/latest
//! ```
//!
//! The three lines gpuspan adds are marked; the rest is plain candle.

use candle_core::{DType, Device, Tensor};
use candle_nn::{linear, loss, AdamW, Linear, Module, Optimizer, ParamsAdamW, VarBuilder, VarMap};

const FEATURES: usize = 8;
const SAMPLES: usize = 256;
const BATCH: usize = 16;

struct Regressor {
    hidden: Linear,
    out: Linear,
}

impl Module for Regressor {
    fn forward(&self, inputs: &Tensor) -> candle_core::Result<Tensor> {
        self.out.forward(&self.hidden.forward(inputs)?.relu()?)
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let epochs: usize = std::env::args().nth(1).map_or(Ok(3), |a| a.parse())?;
    let telemetry = gpuspan::init()?; // gpuspan, 1 of 3

    let device = Device::Cpu;
    let vars = VarMap::new();
    let vb = VarBuilder::from_varmap(&vars, DType::F32, &device);
    let model = Regressor {
        hidden: linear(FEATURES, 32, vb.pp("hidden"))?,
        out: linear(32, 1, vb.pp("out"))?,
    };
    let params = ParamsAdamW {
        lr: 1e-2,
        ..Default::default()
    };
    let mut optimizer = AdamW::new(vars.all_vars(), params)?;
    // Synthetic data: the target is the sum of the inputs.
    let inputs = Tensor::rand(0f32, 1f32, (SAMPLES, FEATURES), &device)?;
    let targets = inputs.sum_keepdim(1)?;

    for epoch in 0..epochs {
        let _epoch = gpuspan::epoch_span!(epoch); // gpuspan, 2 of 3
        let mut total = 0f32;
        for step in 0..SAMPLES / BATCH {
            let _step = gpuspan::step_span!(step, batch_size = BATCH); // gpuspan, 3 of 3
            let x = inputs.narrow(0, step * BATCH, BATCH)?;
            let y = targets.narrow(0, step * BATCH, BATCH)?;
            let loss = loss::mse(&model.forward(&x)?, &y)?;
            optimizer.backward_step(&loss)?;
            total += loss.to_scalar::<f32>()?;
        }
        println!(
            "epoch {epoch}: mean loss {:.4}",
            total / (SAMPLES / BATCH) as f32
        );
    }
    telemetry.shutdown()?;
    Ok(())
}

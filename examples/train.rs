//! A small but real training loop, instrumented with gpuspan.
//!
//! A two-layer perceptron learns a noisy linear function of synthetic data with plain
//! stochastic gradient descent. Every step allocates its activations and gradients, so the
//! memory a step needs grows with `--batch-size`. The loop runs on the CPU; on a machine with
//! an NVIDIA GPU (or with `GPUSPAN_NVML_LIB` pointing at another libnvidia-ml) the spans also
//! carry GPU memory, with no code change.
//!
//! ```text
//! cargo run --release --example train -- --epochs 3 --steps 50 --batch-size 256
//! ```
//!
//! `--batch-size 64,128,256` cycles through batch sizes, one per epoch, and prints the
//! batch-size fit (fixed + per-sample bytes, the largest batch that fits); `--budget 20GiB`
//! (or `80%`) sets a memory budget, and the summary says the headroom under it.

use std::process::ExitCode;

struct Args {
    epochs: usize,
    steps: usize,
    batch_sizes: Vec<usize>,
    budget: Option<gpuspan::MemoryBudget>,
    hidden: usize,
    lr: f32,
}

const USAGE: &str = "usage: train [--epochs N] [--steps N] [--batch-size N[,N...]] \
                     [--budget 20GiB|80%] [--hidden N] [--lr X]";

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        epochs: 3,
        steps: 50,
        batch_sizes: vec![256],
        budget: None,
        hidden: 128,
        lr: 0.01,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        if flag == "--help" || flag == "-h" {
            return Err(USAGE.into());
        }
        let value = it
            .next()
            .ok_or_else(|| format!("{flag} needs a value\n{USAGE}"))?;
        let bad = |what: &str| format!("{flag} {value:?}: expected {what}\n{USAGE}");
        match flag.as_str() {
            "--epochs" => args.epochs = value.parse().map_err(|_| bad("a whole number"))?,
            "--steps" => args.steps = value.parse().map_err(|_| bad("a whole number"))?,
            "--batch-size" => {
                args.batch_sizes = value
                    .split(',')
                    .map(|n| n.trim().parse())
                    .collect::<Result<_, _>>()
                    .map_err(|_| bad("whole numbers separated by commas"))?;
            }
            "--budget" => {
                let budget = value
                    .parse()
                    .map_err(|e: gpuspan::settings::InvalidValue| bad(e.expected()))?;
                args.budget = Some(budget);
            }
            "--hidden" => args.hidden = value.parse().map_err(|_| bad("a whole number"))?,
            "--lr" => args.lr = value.parse().map_err(|_| bad("a number"))?,
            _ => return Err(format!("unknown option {flag}\n{USAGE}")),
        }
    }
    if args.batch_sizes.contains(&0) || args.hidden == 0 {
        return Err(format!(
            "--batch-size and --hidden must be at least 1\n{USAGE}"
        ));
    }
    Ok(args)
}

/// Input features of the synthetic data.
const INPUTS: usize = 32;

/// A deterministic pseudo-random source (xorshift), so runs are repeatable.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> f32 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        ((self.0 >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }
}

struct Mlp {
    w1: Vec<f32>, // INPUTS x hidden
    b1: Vec<f32>,
    w2: Vec<f32>, // hidden
    b2: f32,
    hidden: usize,
}

impl Mlp {
    fn new(hidden: usize, rng: &mut Rng) -> Self {
        let scale = (2.0 / INPUTS as f32).sqrt();
        Self {
            w1: (0..INPUTS * hidden).map(|_| rng.next() * scale).collect(),
            b1: vec![0.0; hidden],
            w2: (0..hidden)
                .map(|_| rng.next() / (hidden as f32).sqrt())
                .collect(),
            b2: 0.0,
            hidden,
        }
    }

    /// One SGD step on a batch; returns the mean squared error before the update.
    fn train_step(&mut self, x: &[f32], y: &[f32], lr: f32) -> f32 {
        let (n, h) = (y.len(), self.hidden);
        // Forward: activations for the whole batch (n x h), kept for the backward pass.
        let mut pre = vec![0.0f32; n * h];
        for i in 0..n {
            let row = &x[i * INPUTS..(i + 1) * INPUTS];
            let out = &mut pre[i * h..(i + 1) * h];
            out.copy_from_slice(&self.b1);
            for (k, &xk) in row.iter().enumerate() {
                let w = &self.w1[k * h..(k + 1) * h];
                for (o, &wk) in out.iter_mut().zip(w) {
                    *o += xk * wk;
                }
            }
        }
        let act: Vec<f32> = pre.iter().map(|&v| v.max(0.0)).collect();
        let pred: Vec<f32> = (0..n)
            .map(|i| {
                let a = &act[i * h..(i + 1) * h];
                a.iter().zip(&self.w2).map(|(a, w)| a * w).sum::<f32>() + self.b2
            })
            .collect();
        let loss = pred
            .iter()
            .zip(y)
            .map(|(p, t)| (p - t).powi(2))
            .sum::<f32>()
            / n as f32;

        // Backward.
        let dpred: Vec<f32> = pred
            .iter()
            .zip(y)
            .map(|(p, t)| 2.0 * (p - t) / n as f32)
            .collect();
        let mut dw2 = vec![0.0f32; h];
        let mut dpre = vec![0.0f32; n * h];
        for i in 0..n {
            let a = &act[i * h..(i + 1) * h];
            for j in 0..h {
                dw2[j] += dpred[i] * a[j];
                if pre[i * h + j] > 0.0 {
                    dpre[i * h + j] = dpred[i] * self.w2[j];
                }
            }
        }
        let mut dw1 = vec![0.0f32; INPUTS * h];
        let mut db1 = vec![0.0f32; h];
        for i in 0..n {
            let row = &x[i * INPUTS..(i + 1) * INPUTS];
            let d = &dpre[i * h..(i + 1) * h];
            for (k, &xk) in row.iter().enumerate() {
                for (g, &dj) in dw1[k * h..(k + 1) * h].iter_mut().zip(d) {
                    *g += xk * dj;
                }
            }
            for (g, &dj) in db1.iter_mut().zip(d) {
                *g += dj;
            }
        }
        // Update.
        for (w, g) in self.w1.iter_mut().zip(&dw1) {
            *w -= lr * g;
        }
        for (b, g) in self.b1.iter_mut().zip(&db1) {
            *b -= lr * g;
        }
        for (w, g) in self.w2.iter_mut().zip(&dw2) {
            *w -= lr * g;
        }
        self.b2 -= lr * dpred.iter().sum::<f32>();
        loss
    }
}

/// A batch of synthetic data: y = x . true_w + noise.
fn batch(rng: &mut Rng, true_w: &[f32], n: usize) -> (Vec<f32>, Vec<f32>) {
    let x: Vec<f32> = (0..n * INPUTS).map(|_| rng.next()).collect();
    let y = (0..n)
        .map(|i| {
            let row = &x[i * INPUTS..(i + 1) * INPUTS];
            row.iter().zip(true_w).map(|(a, b)| a * b).sum::<f32>() + 0.01 * rng.next()
        })
        .collect();
    (x, y)
}

fn mib(bytes: Option<u64>) -> String {
    bytes.map_or("-".into(), |b| {
        format!("{:.1} MiB", b as f64 / (1 << 20) as f64)
    })
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(args) => args,
        Err(message) => {
            eprintln!("{message}");
            return ExitCode::from(2);
        }
    };
    let mut builder = gpuspan::Telemetry::builder();
    if let Some(budget) = args.budget {
        builder = builder.memory_budget(budget);
    }
    let telemetry = match builder.install() {
        Ok(telemetry) => telemetry,
        Err(error) => {
            eprintln!("train: {error}");
            return ExitCode::FAILURE;
        }
    };

    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let true_w: Vec<f32> = (0..INPUTS).map(|_| rng.next()).collect();
    let mut model = Mlp::new(args.hidden, &mut rng);
    for epoch in 0..args.epochs {
        let batch_size = args.batch_sizes[epoch % args.batch_sizes.len()];
        let e = gpuspan::epoch_span!(epoch, lr = f64::from(args.lr));
        let mut loss_sum = 0.0;
        for step in 0..args.steps {
            let _s = gpuspan::step_span!(step, batch_size = batch_size);
            let (x, y) = batch(&mut rng, &true_w, batch_size);
            loss_sum += model.train_step(&x, &y, args.lr);
        }
        let memory = e.memory().unwrap_or_default();
        let gpu = match memory.gpu_used {
            Some(_) => format!(
                "  gpu {} (peak {})",
                mib(memory.gpu_used),
                mib(memory.gpu_peak)
            ),
            None => String::new(),
        };
        println!(
            "epoch {epoch}: loss {:.4}{gpu}  host {} (peak {})",
            loss_sum / args.steps.max(1) as f32,
            mib(memory.host_resident),
            mib(memory.host_peak),
        );
    }

    // Step peak memory as fixed + per-sample bytes, once two batch sizes have run.
    if let Some(fit) = telemetry.batch_fit() {
        let largest = fit
            .max_batch_size
            .map_or(String::new(), |n| format!(", largest batch that fits: {n}"));
        println!(
            "batch-size fit: {} + {} per sample{largest}",
            mib(u64::try_from(fit.fixed_bytes).ok()),
            mib(u64::try_from(fit.per_sample_bytes).ok()),
        );
    }

    match telemetry.shutdown() {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("train: {error}");
            ExitCode::FAILURE
        }
    }
}

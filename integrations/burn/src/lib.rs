//! GPU memory spans for burn's `Learner`, through [gpuspan](https://docs.rs/gpuspan).
//!
//! burn's `Learner` owns its training loop, so `epoch_span!` and `step_span!` cannot wrap
//! it. Two lines give a burn program an `epoch` span per epoch, a `step` span per training
//! iteration and a `validation` span per validation pass, each with the device memory at
//! its start and end and the **peak reached while it was open**, exported wherever gpuspan
//! exports (the run directory by default, any OTLP collector with
//! `OTEL_EXPORTER_OTLP_ENDPOINT`):
//!
//! ```no_run
//! # use burn::train::{Learner, SupervisedTraining, LearnerModel, LearningResult};
//! # fn train<M: LearnerModel>(training: SupervisedTraining<M>, learner: Learner<M>)
//! #     -> Result<(), gpuspan_burn::Error> {
//! let gpuspan = gpuspan_burn::Gpuspan::init("/tmp/artifacts")?; // 1: before training
//! let result = gpuspan.launch(training, learner); // 2: instead of training.launch(learner)
//! # Ok(()) }
//! ```
//!
//! - `ml.epoch` and `ml.step` are burn's own numbers: epochs from 1, iterations from 1 in
//!   each epoch. What each span covers is in [`Gpuspan::launch`].
//! - burn's experiment log (`<artifact dir>/experiment.log`) is written as burn writes it,
//!   by the same global subscriber as gpuspan's layer.
//! - Where the backend reports its allocator (CubeCL's: CUDA, ROCm, Vulkan, Metal, WebGPU),
//!   steps carry `gpu.allocator.allocated.peak` (bytes in use) and
//!   `gpu.allocator.reserved.peak` (bytes reserved), read at each span's edges.
//! - With `GPUSPAN_MEMORY_BUDGET` and `GPUSPAN_MEMORY_BUDGET_STOP=true`, the first reading
//!   over the budget stops training through burn's interrupter at the end of that step;
//!   the step gets `gpu.memory.budget_exceeded` and burn's log says why.
//! - The leak rules, the summary table and `gpuspan report` read burn's epochs and steps
//!   as they read the macros'.

#![warn(missing_docs, unreachable_pub)]

mod logging;
mod steps;

use std::path::{Path, PathBuf};

use burn::train::{Learner, LearnerModel, LearningResult, SupervisedTraining};
use gpuspan::Telemetry;

/// The name of the experiment log burn writes in its artifact directory.
pub const EXPERIMENT_LOG: &str = "experiment.log";

/// gpuspan installed for a burn program: the running [`Telemetry`] and burn's experiment
/// log, under one global subscriber. Dropping it flushes and shuts gpuspan down, printing
/// the summary; keep it until training is over.
#[derive(Debug)]
#[must_use = "dropping Gpuspan shuts gpuspan down at once"]
pub struct Gpuspan {
    telemetry: Telemetry,
    log_file: PathBuf,
}

impl Gpuspan {
    /// gpuspan configured from the environment (`GPUSPAN_*`, `OTEL_*`), with burn's
    /// experiment log at `<artifact_dir>/experiment.log`, where burn's default logger
    /// writes it. Call it once, before any other global subscriber or `log` logger is set.
    ///
    /// # Errors
    /// A gpuspan setting that does not parse, a global subscriber or `log` logger already
    /// set, or an artifact directory that cannot be created.
    pub fn init(artifact_dir: impl AsRef<Path>) -> Result<Self, Error> {
        Self::with_builder(Telemetry::builder(), artifact_dir)
    }

    /// As [`Gpuspan::init`], with gpuspan configured in code (the environment fills in
    /// what `builder` leaves unset).
    ///
    /// # Errors
    /// As [`Gpuspan::init`].
    pub fn with_builder(
        builder: gpuspan::Builder,
        artifact_dir: impl AsRef<Path>,
    ) -> Result<Self, Error> {
        let telemetry = builder.build().map_err(Error::Init)?;
        let log_file = artifact_dir.as_ref().join(EXPERIMENT_LOG);
        logging::install(&log_file, &telemetry)?;
        Ok(Self {
            telemetry,
            log_file,
        })
    }

    /// Runs `training.launch(learner)` with its epochs, steps and validation passes as
    /// spans, and closes the spans still open when it returns.
    ///
    /// The spans open and close on the training thread at the lines burn's loop logs:
    /// - an `epoch` runs from the start of its first batch to the start of the next epoch
    ///   (its validation and checkpoint included);
    /// - a `step` runs from just before its forward pass to just before the next one: the
    ///   forward and backward passes, the optimizer step, the hand-off to burn's metrics and
    ///   the loading of the next batch (burn offers no point between the last two);
    /// - a `validation` runs from its first batch to the next epoch.
    ///
    /// burn's experiment log goes through gpuspan's subscriber, so `training`'s own
    /// application logger is not installed. With the budget's stop action on, the
    /// training's interrupter is told when a reading goes over the budget: burn ends the
    /// run at the end of that step and logs `Training interrupted: <reason>`.
    pub fn launch<M: LearnerModel>(
        &self,
        training: SupervisedTraining<M>,
        learner: Learner<M>,
    ) -> LearningResult<M> {
        let interrupter = training.interrupter();
        self.telemetry
            .on_stop_request(move |reason| interrupter.stop(Some(reason)));
        logging::watch_device(
            burn::module::Module::devices(&learner.model())
                .into_iter()
                .next(),
        );
        let result = training.with_application_logger(None).launch(learner);
        logging::push_allocator();
        steps::close_all();
        logging::watch_device(None);
        result
    }

    /// The running telemetry: findings, the batch-size fit, the run directory, flush.
    pub fn telemetry(&self) -> &Telemetry {
        &self.telemetry
    }

    /// Where burn's experiment log is written.
    pub fn log_file(&self) -> &Path {
        &self.log_file
    }

    /// Flushes and shuts gpuspan down, saying what went wrong (dropping does the same
    /// silently).
    ///
    /// # Errors
    /// As [`Telemetry::shutdown`].
    pub fn shutdown(self) -> Result<(), gpuspan::ShutdownError> {
        self.telemetry.shutdown()
    }
}

/// Why gpuspan could not be installed for a burn program.
#[derive(Debug)]
#[non_exhaustive]
pub enum Error {
    /// A gpuspan setting is invalid, or gpuspan could not start.
    Init(gpuspan::InitError),
    /// Another global tracing subscriber was set first.
    SubscriberAlreadySet,
    /// Another `log` logger was set first.
    LoggerAlreadySet,
    /// The experiment log's path names no file.
    LogFile {
        /// The path given.
        path: PathBuf,
    },
    /// The artifact directory could not be created.
    LogDirectory {
        /// The directory.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Init(error) => write!(f, "gpuspan: {error}"),
            Self::SubscriberAlreadySet => f.write_str(
                "a global tracing subscriber is already set: call Gpuspan::init before \
                 anything installs one (gpuspan-burn installs burn's experiment log and \
                 gpuspan's layer as one subscriber)",
            ),
            Self::LoggerAlreadySet => f.write_str(
                "a `log` logger is already set (env_logger, say): call Gpuspan::init instead \
                 of installing it, since burn's loop is followed through its log lines",
            ),
            Self::LogFile { path } => write!(
                f,
                "the experiment log's path {} names no file: give burn's artifact directory",
                path.display()
            ),
            Self::LogDirectory { path, source } => write!(
                f,
                "cannot create the artifact directory {}: {source}",
                path.display()
            ),
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Init(error) => Some(error),
            Self::LogDirectory { source, .. } => Some(source),
            _ => None,
        }
    }
}

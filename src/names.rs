//! Every name gpuspan writes on the wire: span names, attribute keys, event names and
//! metric instruments, in one place, as `opentelemetry-semantic-conventions` keeps the
//! OTel ones. These strings are public API (the guide's tables in docs/ list them): code
//! that writes or reads one of them takes it from here, never spells it again.
//!
//! This module imports nothing: it is the ground every other module stands on.

/// Span names.
pub mod span {
    /// The span of one epoch (`epoch_span!`).
    pub const EPOCH: &str = "epoch";
    /// The span of one training step (`step_span!`).
    pub const STEP: &str = "step";
    /// `gpuspan run`'s span over the command it ran.
    pub const RUN: &str = "run";
    /// A step's forward pass (PyTorch phases).
    pub const FORWARD: &str = "forward";
    /// From a step's forward pass to the next forward pass or optimizer step.
    pub const BACKWARD: &str = "backward";
    /// A step's `optimizer.step()`.
    pub const OPTIMIZER: &str = "optimizer";
    /// A validation loop (Lightning).
    pub const VALIDATION: &str = "validation";
    /// Lightning's validation sanity check before training.
    pub const SANITY_CHECK: &str = "sanity_check";
    /// A test loop (Lightning's `trainer.test`).
    pub const TEST: &str = "test";
    /// A prediction loop (Lightning's `trainer.predict`).
    pub const PREDICT: &str = "predict";
    /// An evaluation (the Transformers Trainer's `evaluate`).
    pub const EVALUATION: &str = "evaluation";
}

/// Span and resource attribute keys.
pub mod attribute {
    /// The epoch index given to `epoch_span!`.
    pub const ML_EPOCH: &str = "ml.epoch";
    /// The step index given to `step_span!`.
    pub const ML_STEP: &str = "ml.step";
    /// The batch size a step span may carry (read by the batch-size fit).
    pub const BATCH_SIZE: &str = "batch_size";

    /// Device memory in use at the span's start, summed over the devices in scope.
    pub const GPU_MEMORY_START: &str = "gpu.memory.start";
    /// Device memory in use at the span's end.
    pub const GPU_MEMORY_END: &str = "gpu.memory.end";
    /// The highest device memory in use while the span was open.
    pub const GPU_MEMORY_PEAK: &str = "gpu.memory.peak";
    /// End minus start.
    pub const GPU_MEMORY_DELTA: &str = "gpu.memory.delta";
    /// (max - min) / max of the per-device peaks, with several devices.
    pub const GPU_MEMORY_IMBALANCE: &str = "gpu.memory.imbalance";
    /// Where the figures came from: `nvml`, `nvidia-smi`, `amdgpu-sysfs`, `drm-fdinfo`,
    /// `kfd` (joined with `+` for GPUs of several kinds) or `none`.
    pub const GPU_MEMORY_SOURCE: &str = "gpu.memory.source";
    /// How many samples the peak was taken over.
    pub const GPU_MEMORY_SAMPLES: &str = "gpu.memory.samples";
    /// The width in ns each device-memory figure stands for: on spans `gpuspan collect`
    /// enriches, and on the SDK's spans when reading device memory was too slow for the
    /// interval asked and the sampler widened it.
    pub const GPU_MEMORY_RESOLUTION: &str = "gpu.memory.resolution";
    /// The prefix every device-memory key shares (`gpu.memory.*`).
    pub const GPU_MEMORY_PREFIX: &str = "gpu.memory.";
    /// With several devices, each one's figures are `gpu.<index>.memory.<figure>`: this
    /// prefix, its NVML index, [`GPU_DEVICE_MEMORY_INFIX`], then `start`, `end` or `peak`.
    pub const GPU_DEVICE_PREFIX: &str = "gpu.";
    /// What stands between the index and the figure in a device's key.
    pub const GPU_DEVICE_MEMORY_INFIX: &str = ".memory.";

    /// This process's own device memory at the span's start (NVML's process list).
    pub const GPU_PROCESS_MEMORY_START: &str = "gpu.process.memory.start";
    /// This process's own device memory at the span's end.
    pub const GPU_PROCESS_MEMORY_END: &str = "gpu.process.memory.end";
    /// This process's own highest device memory while the span was open.
    pub const GPU_PROCESS_MEMORY_PEAK: &str = "gpu.process.memory.peak";
    /// How often, in ns, each device's process list was read while the span was open (the
    /// widest while it was open): the process figures are as fine as that.
    pub const GPU_PROCESS_MEMORY_RESOLUTION: &str = "gpu.process.memory.resolution";

    /// The framework allocator's highest allocated bytes while the span was open.
    pub const GPU_ALLOCATOR_ALLOCATED_PEAK: &str = "gpu.allocator.allocated.peak";
    /// The framework allocator's highest reserved bytes while the span was open.
    pub const GPU_ALLOCATOR_RESERVED_PEAK: &str = "gpu.allocator.reserved.peak";
    /// Reserved minus allocated at the peak: memory the allocator holds but does not use.
    pub const GPU_ALLOCATOR_FRAGMENTATION_PEAK: &str = "gpu.allocator.fragmentation.peak";
    /// Process device memory minus allocator reserved: what the framework does not see.
    pub const GPU_MEMORY_NON_ALLOCATOR_PEAK: &str = "gpu.memory.non_allocator.peak";

    /// The energy the devices in scope drew while the span was open, in joules: their
    /// energy counters' increase, or for a span shorter than the counters' update period
    /// the sampler's power readings times its duration.
    pub const GPU_ENERGY: &str = "gpu.energy";
    /// `true` when [`GPU_ENERGY`] came from power readings, not the counters.
    pub const GPU_ENERGY_ESTIMATED: &str = "gpu.energy.estimated";
    /// What [`GPU_ENERGY`] covers beyond the devices: `gpu` (a MIG instance's span: the
    /// whole GPU's figure), `socket` (an APU: the CPU's included). Absent: the devices.
    pub const GPU_ENERGY_SCOPE: &str = "gpu.energy.scope";
    /// [`GPU_ENERGY`] over the span's `batch_size`, in joules per sample.
    pub const GPU_ENERGY_PER_SAMPLE: &str = "gpu.energy.per_sample";
    /// With several devices, each one's energy is `gpu.<index>.energy`: this suffix after
    /// [`GPU_DEVICE_PREFIX`] and the index.
    pub const GPU_DEVICE_ENERGY_SUFFIX: &str = ".energy";
    /// [`GPU_ENERGY`] over the span's duration, in watts.
    pub const GPU_POWER_AVG: &str = "gpu.power.avg";
    /// The clock event reasons seen while the span was open (`sw_power_cap`,
    /// `hw_slowdown`, `sync_boost`, `sw_thermal_slowdown`, `hw_thermal_slowdown`,
    /// `hw_power_brake`), a string array; absent when none.
    pub const GPU_THROTTLE_REASONS: &str = "gpu.throttle.reasons";
    /// The share (0 to 1) of the readings of the clock event reasons taken while the span
    /// was open that found the clocks held down.
    pub const GPU_THROTTLE_SHARE: &str = "gpu.throttle.share";
    /// The lowest SM clock read while the span was open (the reading current when it
    /// opened included), in MHz.
    pub const GPU_CLOCK_SM_MIN: &str = "gpu.clock.sm.min";

    /// Host resident memory of this process at the span's start.
    pub const PROCESS_MEMORY_START: &str = "process.memory.start";
    /// Host resident memory at the span's end.
    pub const PROCESS_MEMORY_END: &str = "process.memory.end";
    /// The highest host resident memory while the span was open.
    pub const PROCESS_MEMORY_PEAK: &str = "process.memory.peak";

    /// A device's NVML index (on events and device metrics); for a MIG instance, its parent
    /// GPU's.
    pub const GPU_INDEX: &str = "gpu.index";
    /// A MIG instance's index on its GPU (on events and device metrics), next to
    /// [`GPU_INDEX`]; absent for a whole GPU.
    pub const GPU_MIG_INDEX: &str = "gpu.mig.index";
    /// Device memory in use when a near-OOM or OOM finding was made.
    pub const GPU_MEMORY_USED: &str = "gpu.memory.used";
    /// The device's total memory, on near-OOM and OOM findings; on an OOM forecast, the
    /// limit it forecasts against (the budget where one is set below the total and the
    /// steps are not past it, else the total).
    pub const GPU_MEMORY_LIMIT: &str = "gpu.memory.limit";
    /// The budget a span's peak went over.
    pub const GPU_MEMORY_BUDGET: &str = "gpu.memory.budget";
    /// Memory in use when the rise that led to a near-OOM began.
    pub const GPU_MEMORY_RISE_FROM: &str = "gpu.memory.rise.from";
    /// The innermost span open when that rise began.
    pub const GPU_MEMORY_RISE_SPAN: &str = "gpu.memory.rise.span";
    /// On `gpu.memory.peer_oom`: the other rank's finding (`gpu.memory.oom` or
    /// `gpu.memory.near_oom`).
    pub const GPU_MEMORY_PEER_FINDING: &str = "gpu.memory.peer.finding";
    /// The timeline file written for a near-OOM or OOM finding.
    pub const GPU_MEMORY_TIMELINE: &str = "gpu.memory.timeline";
    /// Which leak rule fired.
    pub const GPU_MEMORY_LEAK_RULE: &str = "gpu.memory.leak.rule";
    /// The first figure of the leak's series.
    pub const GPU_MEMORY_LEAK_FIRST: &str = "gpu.memory.leak.first";
    /// The last figure of the leak's series.
    pub const GPU_MEMORY_LEAK_LAST: &str = "gpu.memory.leak.last";
    /// How many points the leak rule read.
    pub const GPU_MEMORY_LEAK_POINTS: &str = "gpu.memory.leak.points";
    /// Growth per epoch, in bytes, of a suspected leak.
    pub const GPU_MEMORY_LEAK_GROWTH_PER_EPOCH: &str = "gpu.memory.leak.growth_per_epoch";
    /// Growth per step, in bytes, of a suspected leak read from the step trend.
    pub const GPU_MEMORY_LEAK_GROWTH_PER_STEP: &str = "gpu.memory.leak.growth_per_step";
    /// On `gpu.memory.oom_forecast`: in how many steps the steps' peak reaches the limit
    /// at the growth it was forecast with.
    pub const GPU_MEMORY_FORECAST_STEPS: &str = "gpu.memory.forecast.steps";
    /// On `gpu.memory.oom_forecast`: the growth of the steps' peak per step, in bytes, the
    /// forecast used.
    pub const GPU_MEMORY_FORECAST_GROWTH_PER_STEP: &str = "gpu.memory.forecast.growth_per_step";
    /// On `gpu.memory.oom_forecast`: bytes left between the steps' peak now (the fitted
    /// trend's) and the limit.
    pub const GPU_MEMORY_FORECAST_HEADROOM: &str = "gpu.memory.forecast.headroom";
    /// The message of an out-of-memory error (OTel's exception convention).
    pub const EXCEPTION_MESSAGE: &str = "exception.message";

    /// Resource: the run's id, shared by every process of the run.
    pub const ML_RUN_ID: &str = "ml.run.id";
    /// Resource: the process's rank in the job.
    pub const ML_RANK: &str = "ml.rank";
    /// Resource: the process's rank on its node.
    pub const ML_LOCAL_RANK: &str = "ml.local_rank";
    /// Resource: how many ranks the job has.
    pub const ML_WORLD_SIZE: &str = "ml.world_size";
    /// Bytes of the parameters a step's optimizer updates.
    pub const ML_PARAMS_BYTES: &str = "ml.params.bytes";
    /// Bytes of their gradients.
    pub const ML_GRADS_BYTES: &str = "ml.grads.bytes";
    /// Bytes of the optimizer's state (Adam's moments, momentum buffers).
    pub const ML_OPTIMIZER_STATE_BYTES: &str = "ml.optimizer_state.bytes";
    /// Resource: the id every rank of one job shares.
    pub const ML_JOB_ID: &str = "ml.job.id";
    /// Resource: the process id.
    pub const PROCESS_PID: &str = "process.pid";
    /// Resource: the host's name.
    pub const HOST_NAME: &str = "host.name";
    /// Resource: the service's name.
    pub const SERVICE_NAME: &str = "service.name";
    /// `gpuspan run`'s span: the command it ran.
    pub const PROCESS_COMMAND_LINE: &str = "process.command_line";
    /// `gpuspan run`'s span: the command's exit code.
    pub const PROCESS_EXIT_CODE: &str = "process.exit.code";

    /// `gpuspan.sampler.read.duration`: which kind of driver call (see [`super::sampler_call`]).
    pub const GPUSPAN_SAMPLER_CALL: &str = "gpuspan.sampler.call";

    /// Device metrics: the device's UUID.
    pub const HW_ID: &str = "hw.id";
    /// Device metrics: the device's name.
    pub const HW_NAME: &str = "hw.name";
    /// Device metrics: the device's vendor.
    pub const HW_VENDOR: &str = "hw.vendor";
    /// Device metrics: `gpu`.
    pub const HW_TYPE: &str = "hw.type";
    /// `hw.gpu.utilization`'s task (`general`).
    pub const HW_GPU_TASK: &str = "hw.gpu.task";
}

/// The values of `gpuspan.sampler.call`.
pub mod sampler_call {
    /// A device's memory read (`nvmlDeviceGetMemoryInfo`).
    pub const MEMORY: &str = "memory";
    /// A device's process list (`nvmlDeviceGetComputeRunningProcesses`).
    pub const PROCESSES: &str = "processes";
    /// A device's utilization read.
    pub const UTILIZATION: &str = "utilization";
    /// A round of energy, power and clock reads of every device.
    pub const POWER: &str = "power";
}

/// Span event names: the findings of diagnosis.
pub mod event {
    /// Memory grows from epoch to epoch (or along the step trend).
    pub const LEAK_SUSPECTED: &str = "gpu.memory.leak_suspected";
    /// A span's peak went over the memory budget.
    pub const BUDGET_EXCEEDED: &str = "gpu.memory.budget_exceeded";
    /// A device crossed the near-OOM fraction of its memory.
    pub const NEAR_OOM: &str = "gpu.memory.near_oom";
    /// The program ran out of device memory.
    pub const OOM: &str = "gpu.memory.oom";
    /// Another rank of the job ran out of device memory, or came near.
    pub const PEER_OOM: &str = "gpu.memory.peer_oom";
    /// The steps' peak grows toward the device's limit (or the budget) steadily enough to
    /// reach it in a forecast number of steps.
    pub const OOM_FORECAST: &str = "gpu.memory.oom_forecast";
    /// Every finding, in the order the report lists them.
    pub const FINDINGS: [&str; 6] = [
        LEAK_SUSPECTED,
        NEAR_OOM,
        OOM,
        PEER_OOM,
        BUDGET_EXCEEDED,
        OOM_FORECAST,
    ];
}

/// Span events about the clocks, not memory findings: no counter, no mark in the summary.
pub mod clock_event {
    /// A span's share of throttled readings reached the threshold: the clocks were
    /// held down for much of it (its attributes: the reasons, the share, the lowest clock).
    pub const THROTTLED: &str = "gpu.throttled";
}

/// Metric instrument names.
pub mod metric {
    /// Device memory in use, per device.
    pub const HW_GPU_MEMORY_USAGE: &str = "hw.gpu.memory.usage";
    /// Device memory size, per device.
    pub const HW_GPU_MEMORY_LIMIT: &str = "hw.gpu.memory.limit";
    /// Usage over limit, per device.
    pub const HW_GPU_MEMORY_UTILIZATION: &str = "hw.gpu.memory.utilization";
    /// NVML's GPU utilization, per device.
    pub const HW_GPU_UTILIZATION: &str = "hw.gpu.utilization";
    /// The energy a device drew since the sampler started, in joules (a counter), per
    /// device.
    pub const HW_ENERGY: &str = "hw.energy";
    /// The power a device draws, in watts, per device.
    pub const HW_POWER: &str = "hw.power";
    /// The highest device memory since the previous collection, per device.
    pub const GPU_MEMORY_PEAK: &str = "gpu.memory.peak";
    /// Host resident memory of this process.
    pub const PROCESS_MEMORY_USAGE: &str = "process.memory.usage";
    /// Durations of step spans.
    pub const ML_STEP_DURATION: &str = "ml.step.duration";
    /// Durations of epoch spans.
    pub const ML_EPOCH_DURATION: &str = "ml.epoch.duration";
    /// How long each driver call of the sampler took, per kind of call.
    pub const GPUSPAN_SAMPLER_READ_DURATION: &str = "gpuspan.sampler.read.duration";
    /// The time between two readings of device memory, as achieved.
    pub const GPUSPAN_SAMPLER_INTERVAL: &str = "gpuspan.sampler.interval";
    /// Readings of device memory the sampler could not take on schedule.
    pub const GPUSPAN_SAMPLER_MISSED_TICKS: &str = "gpuspan.sampler.missed_ticks";
}

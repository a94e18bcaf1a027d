//! Every environment variable gpuspan reads, by name, so each can be found with grep.

/// `true` turns gpuspan off.
pub(crate) const OTEL_SDK_DISABLED: &str = "OTEL_SDK_DISABLED";
/// `service.name`.
pub(crate) const OTEL_SERVICE_NAME: &str = "OTEL_SERVICE_NAME";
/// Extra resource attributes, `key=value,...`.
pub(crate) const OTEL_RESOURCE_ATTRIBUTES: &str = "OTEL_RESOURCE_ATTRIBUTES";

/// OTLP settings for every signal.
pub(crate) const OTEL_EXPORTER_OTLP_ENDPOINT: &str = "OTEL_EXPORTER_OTLP_ENDPOINT";
pub(crate) const OTEL_EXPORTER_OTLP_PROTOCOL: &str = "OTEL_EXPORTER_OTLP_PROTOCOL";
pub(crate) const OTEL_EXPORTER_OTLP_HEADERS: &str = "OTEL_EXPORTER_OTLP_HEADERS";
pub(crate) const OTEL_EXPORTER_OTLP_TIMEOUT: &str = "OTEL_EXPORTER_OTLP_TIMEOUT";
pub(crate) const OTEL_EXPORTER_OTLP_COMPRESSION: &str = "OTEL_EXPORTER_OTLP_COMPRESSION";
/// TLS: the CA's PEM file, this client's certificate and key, and plain text for a gRPC
/// endpoint given without a scheme.
pub(crate) const OTEL_EXPORTER_OTLP_CERTIFICATE: &str = "OTEL_EXPORTER_OTLP_CERTIFICATE";
pub(crate) const OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE: &str =
    "OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE";
pub(crate) const OTEL_EXPORTER_OTLP_CLIENT_KEY: &str = "OTEL_EXPORTER_OTLP_CLIENT_KEY";
pub(crate) const OTEL_EXPORTER_OTLP_INSECURE: &str = "OTEL_EXPORTER_OTLP_INSECURE";

/// OTLP settings for traces only (they beat the ones for every signal).
pub(crate) const OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: &str = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT";
pub(crate) const OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: &str = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL";
pub(crate) const OTEL_EXPORTER_OTLP_TRACES_HEADERS: &str = "OTEL_EXPORTER_OTLP_TRACES_HEADERS";
pub(crate) const OTEL_EXPORTER_OTLP_TRACES_TIMEOUT: &str = "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT";
pub(crate) const OTEL_EXPORTER_OTLP_TRACES_COMPRESSION: &str =
    "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION";
pub(crate) const OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE: &str =
    "OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE";
pub(crate) const OTEL_EXPORTER_OTLP_TRACES_CLIENT_CERTIFICATE: &str =
    "OTEL_EXPORTER_OTLP_TRACES_CLIENT_CERTIFICATE";
pub(crate) const OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY: &str =
    "OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY";
pub(crate) const OTEL_EXPORTER_OTLP_TRACES_INSECURE: &str = "OTEL_EXPORTER_OTLP_TRACES_INSECURE";

/// OTLP settings for metrics only (they beat the ones for every signal).
pub(crate) const OTEL_EXPORTER_OTLP_METRICS_ENDPOINT: &str = "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT";
pub(crate) const OTEL_EXPORTER_OTLP_METRICS_PROTOCOL: &str = "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL";
pub(crate) const OTEL_EXPORTER_OTLP_METRICS_HEADERS: &str = "OTEL_EXPORTER_OTLP_METRICS_HEADERS";
pub(crate) const OTEL_EXPORTER_OTLP_METRICS_TIMEOUT: &str = "OTEL_EXPORTER_OTLP_METRICS_TIMEOUT";
pub(crate) const OTEL_EXPORTER_OTLP_METRICS_COMPRESSION: &str =
    "OTEL_EXPORTER_OTLP_METRICS_COMPRESSION";
pub(crate) const OTEL_EXPORTER_OTLP_METRICS_CERTIFICATE: &str =
    "OTEL_EXPORTER_OTLP_METRICS_CERTIFICATE";
pub(crate) const OTEL_EXPORTER_OTLP_METRICS_CLIENT_CERTIFICATE: &str =
    "OTEL_EXPORTER_OTLP_METRICS_CLIENT_CERTIFICATE";
pub(crate) const OTEL_EXPORTER_OTLP_METRICS_CLIENT_KEY: &str =
    "OTEL_EXPORTER_OTLP_METRICS_CLIENT_KEY";
pub(crate) const OTEL_EXPORTER_OTLP_METRICS_INSECURE: &str = "OTEL_EXPORTER_OTLP_METRICS_INSECURE";

/// `otlp`, `console`, `none` or `run_dir`, per signal.
pub(crate) const OTEL_TRACES_EXPORTER: &str = "OTEL_TRACES_EXPORTER";
pub(crate) const OTEL_METRICS_EXPORTER: &str = "OTEL_METRICS_EXPORTER";
/// The OpenTelemetry SDK's sampler and its argument: read only to say that gpuspan keeps
/// every span (see `config::Sampling`).
pub(crate) const OTEL_TRACES_SAMPLER: &str = "OTEL_TRACES_SAMPLER";
pub(crate) const OTEL_TRACES_SAMPLER_ARG: &str = "OTEL_TRACES_SAMPLER_ARG";
/// Milliseconds between metric exports.
pub(crate) const OTEL_METRIC_EXPORT_INTERVAL: &str = "OTEL_METRIC_EXPORT_INTERVAL";

/// The sampler's interval.
pub(crate) const GPUSPAN_SAMPLE_INTERVAL: &str = "GPUSPAN_SAMPLE_INTERVAL";
pub(crate) const GPUSPAN_POWER_INTERVAL: &str = "GPUSPAN_POWER_INTERVAL";
/// Path of `libnvidia-ml.so.1`.
pub(crate) const GPUSPAN_NVML_LIB: &str = "GPUSPAN_NVML_LIB";
/// Devices in scope (indexes or UUIDs).
pub(crate) const GPUSPAN_DEVICES: &str = "GPUSPAN_DEVICES";
/// The devices CUDA sees; used for the scope when `GPUSPAN_DEVICES` is unset.
pub(crate) const CUDA_VISIBLE_DEVICES: &str = "CUDA_VISIBLE_DEVICES";
/// The AMD devices ROCr sees.
pub(crate) const ROCR_VISIBLE_DEVICES: &str = "ROCR_VISIBLE_DEVICES";
/// The AMD devices HIP sees, of those ROCr left (else `CUDA_VISIBLE_DEVICES`).
pub(crate) const HIP_VISIBLE_DEVICES: &str = "HIP_VISIBLE_DEVICES";
/// The Intel devices (and sub-devices) Level Zero sees.
pub(crate) const ZE_AFFINITY_MASK: &str = "ZE_AFFINITY_MASK";
/// Where sysfs is (`/sys`): the AMD and Intel GPUs' files.
pub(crate) const GPUSPAN_SYSFS_ROOT: &str = "GPUSPAN_SYSFS_ROOT";
/// Where procfs is (`/proc`): this process's DRM clients' fdinfo.
pub(crate) const GPUSPAN_PROCFS_ROOT: &str = "GPUSPAN_PROCFS_ROOT";
/// Parent of run directories.
pub(crate) const GPUSPAN_RUN_DIR: &str = "GPUSPAN_RUN_DIR";
/// The run's id.
pub(crate) const GPUSPAN_RUN_ID: &str = "GPUSPAN_RUN_ID";
/// Job ids set by launchers (see `config::job`): torchrun's rendezvous id, SLURM's job
/// and step, Open MPI's job id and the key it draws for each job, a PMIx namespace, a
/// PMI-1 key-value space.
pub(crate) const TORCHELASTIC_RUN_ID: &str = "TORCHELASTIC_RUN_ID";
pub(crate) const SLURM_JOB_ID: &str = "SLURM_JOB_ID";
pub(crate) const SLURM_STEP_ID: &str = "SLURM_STEP_ID";
pub(crate) const OMPI_MCA_ESS_BASE_JOBID: &str = "OMPI_MCA_ess_base_jobid";
pub(crate) const OMPI_MCA_ORTE_PRECONDITION_TRANSPORTS: &str =
    "OMPI_MCA_orte_precondition_transports";
pub(crate) const PMIX_NAMESPACE: &str = "PMIX_NAMESPACE";
pub(crate) const PMI_KVSNAME: &str = "PMI_KVSNAME";
/// The job id every rank shares when no launcher gives one (`gpuspan run` sets it).
pub const GPUSPAN_JOB_ID: &str = "GPUSPAN_JOB_ID";
/// Serve a Prometheus scrape endpoint.
pub(crate) const GPUSPAN_PROMETHEUS_ADDR: &str = "GPUSPAN_PROMETHEUS_ADDR";
/// How many completed spans may wait for the destination (an outage's buffer).
pub(crate) const GPUSPAN_EXPORT_QUEUE: &str = "GPUSPAN_EXPORT_QUEUE";

/// Whether the run directory gets `timeline.bin`.
pub(crate) const GPUSPAN_TIMELINE: &str = "GPUSPAN_TIMELINE";
/// Whether the run directory gets TensorBoard event files.
pub(crate) const GPUSPAN_TENSORBOARD: &str = "GPUSPAN_TENSORBOARD";

/// Highest memory a span may reach: `20GiB`, `512MB`, or `80%` of each device.
pub(crate) const GPUSPAN_MEMORY_BUDGET: &str = "GPUSPAN_MEMORY_BUDGET";
/// `true`: a span over the budget also gets an error status.
pub(crate) const GPUSPAN_MEMORY_BUDGET_ERROR: &str = "GPUSPAN_MEMORY_BUDGET_ERROR";
/// `true`: the first reading over the budget asks the training loop to stop.
pub(crate) const GPUSPAN_MEMORY_BUDGET_STOP: &str = "GPUSPAN_MEMORY_BUDGET_STOP";
/// `true`: the first OOM forecast asks the training loop to stop.
pub(crate) const GPUSPAN_MEMORY_FORECAST_STOP: &str = "GPUSPAN_MEMORY_FORECAST_STOP";
/// The ratio rule's factor: end memory against the first epoch's (default 1.5).
pub(crate) const GPUSPAN_LEAK_RATIO: &str = "GPUSPAN_LEAK_RATIO";
/// Epochs (and steps of each epoch) left out of leak detection at the start (default 1).
pub(crate) const GPUSPAN_LEAK_WARMUP: &str = "GPUSPAN_LEAK_WARMUP";
/// Fraction of a device's total that counts as near out of memory (default 95%).
pub(crate) const GPUSPAN_NEAR_OOM_THRESHOLD: &str = "GPUSPAN_NEAR_OOM_THRESHOLD";
/// How much of the timeline the near-OOM recorder keeps (default 30s).
pub(crate) const GPUSPAN_NEAR_OOM_WINDOW: &str = "GPUSPAN_NEAR_OOM_WINDOW";

/// The PyTorch integration: whether `gpuspan run` gives a Python command its bootstrap,
/// the phases of every step, and PyTorch's memory history (see `config::torch`).
pub(crate) const GPUSPAN_TORCH: &str = "GPUSPAN_TORCH";
pub(crate) const GPUSPAN_TORCH_PHASES: &str = "GPUSPAN_TORCH_PHASES";
pub(crate) const GPUSPAN_TORCH_MEMORY_HISTORY: &str = "GPUSPAN_TORCH_MEMORY_HISTORY";

/// Position in a distributed run, as torchrun and SLURM set it.
pub(crate) const RANK: &str = "RANK";
pub(crate) const LOCAL_RANK: &str = "LOCAL_RANK";
pub(crate) const WORLD_SIZE: &str = "WORLD_SIZE";
pub(crate) const SLURM_PROCID: &str = "SLURM_PROCID";
pub(crate) const SLURM_LOCALID: &str = "SLURM_LOCALID";
pub(crate) const SLURM_NTASKS: &str = "SLURM_NTASKS";
/// The same, as Open MPI's `mpirun` sets them.
pub(crate) const OMPI_COMM_WORLD_RANK: &str = "OMPI_COMM_WORLD_RANK";
pub(crate) const OMPI_COMM_WORLD_LOCAL_RANK: &str = "OMPI_COMM_WORLD_LOCAL_RANK";
pub(crate) const OMPI_COMM_WORLD_SIZE: &str = "OMPI_COMM_WORLD_SIZE";
/// The same, as MPICH's `mpiexec` (Hydra) sets them.
pub(crate) const PMI_RANK: &str = "PMI_RANK";
pub(crate) const MPI_LOCALRANKID: &str = "MPI_LOCALRANKID";
pub(crate) const PMI_SIZE: &str = "PMI_SIZE";
/// The rank, as a PMIx launcher sets it.
pub(crate) const PMIX_RANK: &str = "PMIX_RANK";

/// The filter of the event (log) layer `install()` adds.
pub(crate) const RUST_LOG: &str = "RUST_LOG";
/// Where `nvidia-smi` is looked for.
pub(crate) const PATH: &str = "PATH";

/// Every variable above, for tests that clear the environment and for the check that
/// each one is in the settings table or read for another reason.
#[cfg(test)]
pub(crate) const ALL: &[&str] = &[
    OTEL_SDK_DISABLED,
    OTEL_SERVICE_NAME,
    OTEL_RESOURCE_ATTRIBUTES,
    OTEL_EXPORTER_OTLP_ENDPOINT,
    OTEL_EXPORTER_OTLP_PROTOCOL,
    OTEL_EXPORTER_OTLP_HEADERS,
    OTEL_EXPORTER_OTLP_TIMEOUT,
    OTEL_EXPORTER_OTLP_COMPRESSION,
    OTEL_EXPORTER_OTLP_TRACES_ENDPOINT,
    OTEL_EXPORTER_OTLP_TRACES_PROTOCOL,
    OTEL_EXPORTER_OTLP_TRACES_HEADERS,
    OTEL_EXPORTER_OTLP_TRACES_TIMEOUT,
    OTEL_EXPORTER_OTLP_TRACES_COMPRESSION,
    OTEL_EXPORTER_OTLP_METRICS_ENDPOINT,
    OTEL_EXPORTER_OTLP_METRICS_PROTOCOL,
    OTEL_EXPORTER_OTLP_METRICS_HEADERS,
    OTEL_EXPORTER_OTLP_METRICS_TIMEOUT,
    OTEL_EXPORTER_OTLP_METRICS_COMPRESSION,
    OTEL_EXPORTER_OTLP_CERTIFICATE,
    OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE,
    OTEL_EXPORTER_OTLP_CLIENT_KEY,
    OTEL_EXPORTER_OTLP_INSECURE,
    OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE,
    OTEL_EXPORTER_OTLP_TRACES_CLIENT_CERTIFICATE,
    OTEL_EXPORTER_OTLP_TRACES_CLIENT_KEY,
    OTEL_EXPORTER_OTLP_TRACES_INSECURE,
    OTEL_EXPORTER_OTLP_METRICS_CERTIFICATE,
    OTEL_EXPORTER_OTLP_METRICS_CLIENT_CERTIFICATE,
    OTEL_EXPORTER_OTLP_METRICS_CLIENT_KEY,
    OTEL_EXPORTER_OTLP_METRICS_INSECURE,
    OTEL_TRACES_EXPORTER,
    OTEL_METRICS_EXPORTER,
    OTEL_TRACES_SAMPLER,
    OTEL_TRACES_SAMPLER_ARG,
    OTEL_METRIC_EXPORT_INTERVAL,
    GPUSPAN_SAMPLE_INTERVAL,
    GPUSPAN_POWER_INTERVAL,
    GPUSPAN_NVML_LIB,
    GPUSPAN_DEVICES,
    CUDA_VISIBLE_DEVICES,
    ROCR_VISIBLE_DEVICES,
    HIP_VISIBLE_DEVICES,
    ZE_AFFINITY_MASK,
    GPUSPAN_SYSFS_ROOT,
    GPUSPAN_PROCFS_ROOT,
    GPUSPAN_RUN_DIR,
    GPUSPAN_RUN_ID,
    TORCHELASTIC_RUN_ID,
    GPUSPAN_JOB_ID,
    SLURM_JOB_ID,
    SLURM_STEP_ID,
    OMPI_MCA_ESS_BASE_JOBID,
    OMPI_MCA_ORTE_PRECONDITION_TRANSPORTS,
    PMIX_NAMESPACE,
    PMI_KVSNAME,
    GPUSPAN_PROMETHEUS_ADDR,
    GPUSPAN_EXPORT_QUEUE,
    GPUSPAN_TIMELINE,
    GPUSPAN_TENSORBOARD,
    GPUSPAN_MEMORY_BUDGET,
    GPUSPAN_MEMORY_BUDGET_ERROR,
    GPUSPAN_MEMORY_BUDGET_STOP,
    GPUSPAN_MEMORY_FORECAST_STOP,
    GPUSPAN_LEAK_RATIO,
    GPUSPAN_LEAK_WARMUP,
    GPUSPAN_NEAR_OOM_THRESHOLD,
    GPUSPAN_NEAR_OOM_WINDOW,
    GPUSPAN_TORCH,
    GPUSPAN_TORCH_PHASES,
    GPUSPAN_TORCH_MEMORY_HISTORY,
    RANK,
    LOCAL_RANK,
    WORLD_SIZE,
    SLURM_PROCID,
    SLURM_LOCALID,
    SLURM_NTASKS,
    OMPI_COMM_WORLD_RANK,
    OMPI_COMM_WORLD_LOCAL_RANK,
    OMPI_COMM_WORLD_SIZE,
    PMI_RANK,
    MPI_LOCALRANKID,
    PMI_SIZE,
    PMIX_RANK,
    RUST_LOG,
];

from collections.abc import Callable, Mapping
from datetime import timedelta
from os import PathLike
from types import TracebackType
from typing import Any, Literal, Protocol, TypeVar

from ._report import Report as Report

__version__: str

_F = TypeVar("_F", bound=Callable[..., object])
_Duration = float | timedelta | str

class Allocator(Protocol):
    """An allocator whose exact peaks spans record (``gpuspan.init(allocator=...)``)."""

    def read(self) -> tuple[int, int, int, int]:
        """``(allocated, reserved, peak_allocated, peak_reserved)`` in bytes."""
    def reset_peak(self) -> None: ...

class TorchCudaAllocator:
    def __init__(self, torch: object, device: int | None = ...) -> None: ...
    def read(self) -> tuple[int, int, int, int]: ...
    def reset_peak(self) -> None: ...

class TorchXpuAllocator:
    def __init__(self, torch: object, device: int | None = ...) -> None: ...
    def read(self) -> tuple[int, int, int, int]: ...
    def reset_peak(self) -> None: ...

class Telemetry:
    """The running telemetry: sampler, exporters and run directory."""

    @property
    def run_dir(self) -> str | None: ...
    @property
    def run_id(self) -> str | None: ...
    @property
    def memory_source(self) -> str | None: ...
    @property
    def diagnosis_dir(self) -> str | None:
        """Where near-OOM timelines and memory snapshots go, also when spans go over OTLP."""
    def findings(self, event: str) -> int:
        """How many diagnosis findings of one kind (``"gpu.memory.near_oom"``) so far."""
    def stop_requested(self) -> str | None:
        """Why gpuspan asks the loop to stop (``memory_budget_stop``,
        ``memory_forecast_stop``), or ``None``."""
    @property
    def memory_budget_stop(self) -> bool:
        """Whether a reading over the memory budget asks the loop to stop."""
    @property
    def memory_forecast_stop(self) -> bool:
        """Whether an OOM forecast (``gpu.memory.oom_forecast``) asks the loop to stop."""
    @property
    def is_shut_down(self) -> bool: ...
    def flush(self) -> None: ...
    def shutdown(self) -> None: ...

class ActiveSpan:
    """An open span, as ``with gpuspan.step(i) as s`` gives it."""

    @property
    def trace_id(self) -> int: ...
    @property
    def span_id(self) -> int: ...
    @property
    def trace_flags(self) -> int: ...
    @property
    def valid(self) -> bool: ...
    @property
    def kind(self) -> int:
        """0 for an epoch span, 1 for a step span, 2 for any other."""
    def abandon(self) -> None: ...
    def set_attribute(self, key: str, value: object) -> None: ...
    @property
    def is_open(self) -> bool: ...

class Span:
    """A context manager (``with``, ``async with``) and a decorator."""

    def __enter__(self) -> ActiveSpan: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> Literal[False]: ...
    async def __aenter__(self) -> ActiveSpan: ...
    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> Literal[False]: ...
    def __call__(self, func: _F) -> _F: ...

def init(
    *,
    disabled: bool | str = ...,
    service_name: str = ...,
    resource_attributes: Mapping[str, object] = ...,
    sample_interval: _Duration = ...,
    power_interval: _Duration = ...,
    nvml_lib: str | PathLike[str] = ...,
    devices: str | list[int | str] = ...,
    sysfs_root: str | PathLike[str] = ...,
    procfs_root: str | PathLike[str] = ...,
    run_dir: str | PathLike[str] = ...,
    run_id: str = ...,
    job_id: str = ...,
    endpoint: str = ...,
    protocol: Literal["grpc", "http/protobuf"] = ...,
    headers: Mapping[str, str] = ...,
    timeout: _Duration = ...,
    compression: Literal["gzip", "none"] = ...,
    certificate: str | PathLike[str] = ...,
    client_certificate: str | PathLike[str] = ...,
    client_key: str | PathLike[str] = ...,
    insecure: bool | str = ...,
    traces_exporter: Literal["otlp", "console", "none", "run_dir"] = ...,
    metrics_exporter: Literal["otlp", "console", "none", "run_dir"] = ...,
    metric_export_interval: _Duration = ...,
    prometheus_addr: int | str = ...,
    export_queue: int = ...,
    summary: bool | str = ...,
    flush_on_signal: bool = ...,
    timeline: bool | str = ...,
    tensorboard: bool | str = ...,
    memory_budget: int | str = ...,
    memory_budget_error: bool | str = ...,
    memory_budget_stop: bool | str = ...,
    memory_forecast_stop: bool | str = ...,
    leak_ratio: float = ...,
    leak_warmup: int = ...,
    near_oom_threshold: float | str = ...,
    near_oom_window: _Duration = ...,
    allocator: Literal["auto"] | Allocator | None = ...,
) -> Telemetry:
    """Sets gpuspan up and installs it for this process; returns the :class:`Telemetry`.

    A keyword beats its variable, which beats the default; text is read as the variable
    reads it. ``allocator`` chooses the allocator whose peaks spans record: ``"auto"``,
    ``None`` (off), or an :class:`Allocator`.

    Keywords, one per row of the crate's settings table (the variable, then the default, as
    the variable writes it):

    - disabled (OTEL_SDK_DISABLED): Records nothing, at next to no cost. Default: false.
    - service_name (OTEL_SERVICE_NAME): The service.name of every span and metric point. Default:
      service.name of OTEL_RESOURCE_ATTRIBUTES, else unknown_service:<executable>.
    - resource_attributes (OTEL_RESOURCE_ATTRIBUTES): Attributes added to the resource. Default: none.
    - sample_interval (GPUSPAN_SAMPLE_INTERVAL): Time between two readings of every device. Default: 5ms.
    - power_interval (GPUSPAN_POWER_INTERVAL): Time between two readings of energy and power. Default: 20ms.
    - nvml_lib (GPUSPAN_NVML_LIB): Where NVML is loaded from. Default: the system's.
    - devices (GPUSPAN_DEVICES): The NVIDIA devices in scope. Default: CUDA_VISIBLE_DEVICES, else all.
    - sysfs_root (GPUSPAN_SYSFS_ROOT): Where sysfs is, for AMD and Intel GPUs' files. Default: /sys.
    - procfs_root (GPUSPAN_PROCFS_ROOT): Where procfs is, for this process's DRM clients. Default: /proc.
    - run_dir (GPUSPAN_RUN_DIR): The parent of run directories. Default: gpuspan-runs.
    - run_id (GPUSPAN_RUN_ID): The run's id (ml.run.id) and its directory's name. Default: the job's
      directory name (see job_id), else date-time-pid.
    - job_id (GPUSPAN_JOB_ID): The id every rank of one job shares (ml.job.id), naming the job's
      directory. Default: the launcher's (torchrun, Open MPI, PMIx, PMI, SLURM), else this variable
      (gpuspan run sets it to its run id).
    - endpoint (OTEL_EXPORTER_OTLP_ENDPOINT): The OTLP collector's URL. Default: none: the run directory.
    - protocol (OTEL_EXPORTER_OTLP_PROTOCOL): The OTLP transport. Default: http/protobuf.
    - headers (OTEL_EXPORTER_OTLP_HEADERS): Headers every OTLP request carries. Default: none.
    - timeout (OTEL_EXPORTER_OTLP_TIMEOUT): How long one OTLP export may take; shutdown waits at most this
      long. Default: 10000.
    - compression (OTEL_EXPORTER_OTLP_COMPRESSION): How OTLP requests are compressed. Default: none.
    - certificate (OTEL_EXPORTER_OTLP_CERTIFICATE): The CA an https:// endpoint's certificate is
      checked against, instead of the system's roots. Default: the system's roots, else the bundled
      web roots.
    - client_certificate (OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE): This client's certificate, for an
      endpoint that asks for one (mutual TLS). Default: none.
    - client_key (OTEL_EXPORTER_OTLP_CLIENT_KEY): This client's private key, with its certificate
      (mutual TLS). Default: none.
    - insecure (OTEL_EXPORTER_OTLP_INSECURE): Plain text to a gRPC endpoint given as host:port,
      without a scheme. Default: false.
    - traces_exporter (OTEL_TRACES_EXPORTER): Where spans go. Default: otlp with an endpoint, else
      run_dir.
    - metrics_exporter (OTEL_METRICS_EXPORTER): Where metric points go. Default: otlp with an endpoint,
      else run_dir.
    - metric_export_interval (OTEL_METRIC_EXPORT_INTERVAL): Time between two exports of metric points.
      Default: 60000.
    - prometheus_addr (GPUSPAN_PROMETHEUS_ADDR): Where a Prometheus scrape endpoint is served. Default:
      off.
    - export_queue (GPUSPAN_EXPORT_QUEUE): Completed spans that may wait while the destination is
      unreachable. Default: 65536.
    - summary: Whether shutdown prints the per-epoch table of a run directory. Default: true.
    - flush_on_signal: Whether completed spans are flushed on SIGINT and SIGTERM. Default: true.
    - timeline (GPUSPAN_TIMELINE): Whether the run directory gets timeline.bin, every sample that changed
      a figure. Default: on with the run directory, off with OTLP.
    - tensorboard (GPUSPAN_TENSORBOARD): Whether the run directory gets TensorBoard event files. Default:
      off.
    - memory_budget (GPUSPAN_MEMORY_BUDGET): Memory a span may peak at on each device. Default: none.
    - memory_budget_error (GPUSPAN_MEMORY_BUDGET_ERROR): Whether a span over the budget also gets an error
      status. Default: false.
    - memory_budget_stop (GPUSPAN_MEMORY_BUDGET_STOP): Whether the first reading over the budget asks the
      training loop to stop. Default: false.
    - memory_forecast_stop (GPUSPAN_MEMORY_FORECAST_STOP): Whether the first OOM forecast asks the
      training loop to stop. Default: false.
    - leak_ratio (GPUSPAN_LEAK_RATIO): The ratio rule's factor: end memory this many times the first
      epoch's. Default: 1.5.
    - leak_warmup (GPUSPAN_LEAK_WARMUP): Epochs (and steps of each epoch) leak detection leaves out at the
      start. Default: 1.
    - near_oom_threshold (GPUSPAN_NEAR_OOM_THRESHOLD): The fraction of a device's total that counts as
      near out of memory. Default: 95%.
    - near_oom_window (GPUSPAN_NEAR_OOM_WINDOW): How much of the sampled timeline the near-OOM recorder
      keeps. Default: 30s.
    """
def epoch(index: int, **attributes: object) -> Span: ...
def step(index: int, **attributes: object) -> Span: ...
def span(name: str, **attributes: object) -> Span: ...
def record_allocator(allocated: int, reserved: int) -> None: ...
def record_oom(message: str = ...) -> None: ...
def report(run_dir: str | PathLike[str] | None = ...) -> Report: ...

class Diff:
    """Two runs compared (``gpuspan.diff``): the fields of ``gpuspan diff --json``."""

    passed: bool
    exit_code: int
    base: dict[str, Any]
    new: dict[str, Any]
    rows: list[dict[str, Any]]
    only_base: list[dict[str, Any]]
    only_new: list[dict[str, Any]]
    @property
    def regressions(self) -> list[tuple[dict[str, Any], dict[str, Any]]]: ...
    def to_dict(self) -> dict[str, Any]: ...
    def table(self) -> str: ...
    def markdown(self) -> str: ...
    def __bool__(self) -> bool: ...
    def _repr_html_(self) -> str: ...

def diff(
    base: str | PathLike[str],
    new: str | PathLike[str],
    max_increase: str | list[str] | None = ...,
) -> Diff:
    """Compares two runs as ``gpuspan diff BASE NEW`` does; ``ValueError`` on bad input."""

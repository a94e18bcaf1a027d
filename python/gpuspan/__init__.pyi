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
        """Why gpuspan asks the loop to stop (``memory_budget_stop``), or ``None``."""
    @property
    def memory_budget_stop(self) -> bool:
        """Whether a reading over the memory budget asks the loop to stop."""
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
    leak_ratio: float = ...,
    leak_warmup: int = ...,
    near_oom_threshold: float | str = ...,
    near_oom_window: _Duration = ...,
    allocator: Literal["auto"] | Allocator | None = ...,
) -> Telemetry: ...
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

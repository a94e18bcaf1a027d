"""PyTorch's CUDA memory history, kept while training and saved when memory runs out.

Opt-in under ``gpuspan run`` with ``GPUSPAN_TORCH_MEMORY_HISTORY=1`` (or the number of
entries to keep, 100000 by default): ``torch.cuda.memory._record_memory_history`` records
every allocation with its Python stack, in a bounded ring, and at a near-OOM crossing or an
OOM forecast (each seen at the end of the step gpuspan has found it by) or an out-of-memory
error (before the exception goes on) the snapshot is saved to the run directory as
``memory-snapshot-rank<r>-step<s>-<trace id>-<near-oom|oom-forecast|oom>.pickle``, which
PyTorch's memory_viz (https://pytorch.org/memory_viz) opens. Nothing here changes the exit status.
"""

import os
import sys

from . import _native

DEFAULT_ENTRIES = _native.DEFAULT_MEMORY_HISTORY_ENTRIES
NEAR_OOM = "gpu.memory.near_oom"
OOM_FORECAST = "gpu.memory.oom_forecast"


def entries():
    """The ring's size from ``GPUSPAN_TORCH_MEMORY_HISTORY``, read by gpuspan's settings
    table (a switch, or a number of allocations), or ``None`` when off. A value that is
    neither raises ``ValueError`` naming the variable, as every setting's does."""
    return _native.torch_memory_history()


class MemoryHistory:
    """The history of one process's CUDA allocations; ``memory`` is ``torch.cuda.memory``."""

    def __init__(self, memory, entries, rank):
        self._memory = memory
        self._rank = rank
        self._near_oom_seen = 0
        self._forecasts_seen = 0
        memory._record_memory_history(
            enabled="all", context="all", stacks="python", max_entries=entries
        )

    def after_step(self, telemetry, step, trace_id, directory):
        """Saves a snapshot if the device crossed the near-OOM threshold, or an OOM was
        forecast, since the last call; returns its path or ``None``."""
        crossings = telemetry.findings(NEAR_OOM)
        forecasts = telemetry.findings(OOM_FORECAST)
        if crossings > self._near_oom_seen:
            reason = "near-oom"
        elif forecasts > self._forecasts_seen:
            reason = "oom-forecast"
        else:
            return None
        self._near_oom_seen = crossings
        self._forecasts_seen = forecasts
        return self.save(reason, step, trace_id, directory)

    def save(self, reason, step, trace_id, directory):
        """Writes the snapshot; returns its path, or ``None`` (with one line on stderr) when
        it cannot be written."""
        name = f"memory-snapshot-rank{self._rank}-step{step}-{trace_id:032x}-{reason}.pickle"
        path = os.path.join(directory, name)
        try:
            os.makedirs(directory, exist_ok=True)
            self._memory._dump_snapshot(path)
        except Exception as error:  # noqa: BLE001 - the training goes on
            print(f"gpuspan: warning: the memory snapshot {path} could not be saved ({error})",
                  file=sys.stderr)
            return None
        print(f"gpuspan: memory snapshot for memory_viz: {path}", file=sys.stderr)
        return path


def start(torch):
    """A :class:`MemoryHistory` when ``GPUSPAN_TORCH_MEMORY_HISTORY`` turns it on and CUDA
    is available, else ``None`` (with one line saying why, when it was asked for)."""
    size = entries()
    if size is None:
        return None
    cuda = getattr(torch, "cuda", None)
    if cuda is None or not cuda.is_available():
        print("gpuspan: GPUSPAN_TORCH_MEMORY_HISTORY is set, but CUDA is not available: no "
              "memory history is kept", file=sys.stderr)
        return None
    # The rank as gpuspan reads it: torchrun's, SLURM's, Open MPI's, MPICH's, PMIx's.
    rank = _native.launcher_rank()
    rank = 0 if rank is None else rank
    return MemoryHistory(cuda.memory, size, rank)

"""The stop on memory (``memory_budget_stop``, ``memory_forecast_stop``) as the whole job's
decision.

In a job of several ranks (DDP, FSDP) a rank that stops alone leaves the others in their
next collective: gloo fails it when the peer goes, NCCL waits until its timeout. So the
ranks decide together, and every rank stops after the same optimizer step.

At the end of each optimizer step every rank starts a reduction of its own request (its
device went over its budget or was forecast to run out of memory, or not) over a gloo
group of gpuspan's own, and does not wait for it. At the end of the next step it reads the
result, the same on every rank, and the job stops after that step when any rank asked. The
read does not wait in practice: that step's own gradient all-reduce could only finish once
every rank had started its part, so the reduction was done long before. Per step this
costs the training thread the start of one small gloo operation and the read of a finished
one: no device synchronisation, no wait on the network
(``python/benches/job_stop_cost.py`` measures it against a blocking reduction). The price
is that the job stops one step after the step that went over, where a process alone stops
after that step itself. A blocking reduction each step would stop one step earlier, but
would wait a network round trip on every step, and on NCCL synchronise the device with the
host.

A job of one process decides alone, at once. Every rank of a job needs the same
``memory_budget_stop`` and ``memory_forecast_stop`` (a launcher gives them one
environment): only ranks with either take part. If the reduction cannot be read (a rank
died, or took no part for longer than :data:`PATIENCE`), each rank decides alone from then
on, with one warning line: the training's own collectives report a rank that died.

Threading: the training thread of each rank, in the callbacks' hooks.
"""

import datetime
import sys

import gpuspan

from . import _frameworks

# How long the read of a reduction may wait before the ranks stop deciding together. In a
# job whose ranks reduce their gradients every step it is ready at once.
PATIENCE = datetime.timedelta(seconds=60)

# (the default process group, gpuspan's gloo group over the same ranks): made once per
# default group, by every rank at the same point (the start of training).
_group = (None, None)


def _job_group():
    """gpuspan's gloo group over the job's ranks, or ``None`` for a job of one process or
    one without the budget's stop."""
    global _group
    telemetry = gpuspan._telemetry
    if telemetry is None or not (
        telemetry.memory_budget_stop or getattr(telemetry, "memory_forecast_stop", False)
    ):
        return None
    dist = sys.modules.get("torch.distributed")
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return None
    if dist.get_world_size() < 2:
        return None
    world, group = _group
    if world is not dist.group.WORLD:
        group = dist.new_group(backend="gloo")
        _group = (dist.group.WORLD, group)
    return group


def _asked_why():
    """What another rank's request to stop means, by the stops this job has on."""
    telemetry = gpuspan._telemetry
    budget = telemetry is not None and telemetry.memory_budget_stop
    forecast = telemetry is not None and getattr(telemetry, "memory_forecast_stop", False)
    if budget and forecast:
        return ("went over its memory budget or was forecast to run out of memory "
                "(GPUSPAN_MEMORY_BUDGET_STOP, GPUSPAN_MEMORY_FORECAST_STOP)")
    if forecast:
        return "was forecast to run out of memory (GPUSPAN_MEMORY_FORECAST_STOP)"
    return "went over its memory budget (GPUSPAN_MEMORY_BUDGET_STOP)"


class JobStop:
    """Whether the training stops after this optimizer step, decided by every rank of the
    job together (see the module)."""

    def __init__(self):
        self._group = None
        self._flag = None  # the one-integer tensor each reduction runs on, reused
        self._pending = None  # the reduction started at the last step end
        self._decided = None  # why the job stops, once decided

    def begin(self):
        """At the start of training, on every rank."""
        self._pending = None
        self._decided = None
        try:
            self._group = _job_group()
            if self._group is not None:
                import torch

                self._flag = torch.zeros(1, dtype=torch.int32)
        except Exception as error:  # noqa: BLE001 - the training goes on, ranks decide alone
            self._group = None
            _frameworks.warn(
                f"the ranks cannot share the budget's stop ({type(error).__name__}: {error}); "
                "each rank decides alone"
            )

    def after_step(self):
        """At the end of each optimizer step: why the job stops after it, or ``None``."""
        if self._decided is not None:
            return self._decided
        mine = _frameworks.stop_reason()
        if self._group is None:
            self._decided = mine
            return mine
        asking = self._read()
        if self._group is None:  # the reduction failed: alone from now on
            self._decided = mine
            return mine
        if asking:
            self._decided = mine or f"rank {asking - 1} of the job {_asked_why()}"
            return self._decided
        self._start(mine is not None)
        return None

    def end(self):
        """At the end of training: the last reduction is left to finish on its own."""
        self._pending = None

    def _start(self, asking):
        """Starts this step's reduction on the flag, free again since `_read`."""
        dist = sys.modules["torch.distributed"]
        try:
            self._flag.fill_(dist.get_rank() + 1 if asking else 0)
            self._pending = dist.all_reduce(
                self._flag, op=dist.ReduceOp.MAX, group=self._group, async_op=True
            )
        except Exception as error:  # noqa: BLE001
            self._alone(error)

    def _read(self):
        """The previous step's result: 0, or 1 + the highest rank that asked to stop."""
        work, self._pending = self._pending, None
        if work is None:
            return 0
        try:
            if not work.wait(PATIENCE):
                raise TimeoutError(f"no answer within {PATIENCE.total_seconds():.0f} s")
            return int(self._flag.item())
        except Exception as error:  # noqa: BLE001
            self._alone(error)
            return 0

    def _alone(self, error):
        self._group = None
        _frameworks.warn(
            f"the job's ranks could not share the budget's stop ({type(error).__name__}: "
            f"{error}); each rank decides alone from now on"
        )

"""Spans for a PyTorch program that never imported gpuspan, under ``gpuspan run``.

``gpuspan run``'s bootstrap (a ``sitecustomize``) calls :func:`arrived`, which the package
registers in the entry point group ``gpuspan.autorun`` (``pyproject.toml``), once the program
has imported ``torch``, Lightning or the Transformers Trainer. For ``torch``, global optimizer hooks open one
``step`` span per optimizer step: a step covers all the work since the previous step ended
(data loading, forward, backward, gradient accumulation, the optimizer); the first opens at
the first forward pass with gradients enabled. ``ml.step`` is the step's index, counting
optimizer steps from 0. For Lightning and Transformers, their callbacks take the steps over
(see :mod:`gpuspan._claim`).

gpuspan is set up on the first step (or the program's first own span), not at import, so
that a program which calls ``gpuspan.init()`` itself keeps its settings. The step open when
the program ends normally had no optimizer step: it is left unexported. So is the step open
when a span it was opened in ends (the program's own ``gpuspan.epoch``): the next forward
pass opens the next step, inside the next epoch; a step opened outside any epoch (a
forward pass with gradients before the loop) is dropped when an epoch opens. An uncaught
exception ends it with the error, and an out-of-memory error is recorded as
``gpu.memory.oom`` first. Nothing here changes what the program computes or its exit
status; a failure turns the hooks off with one warning line.
"""

import atexit
import os
import sys

import gpuspan

from . import _claim, _frameworks, _native, _phases, _rank_device, _spans
from . import torch as _torch_figures

_steps = None


def arrived(name, module):
    """``name`` was imported by the program (``module`` as its code left it)."""
    global _steps
    module = sys.modules.get(name, module)
    if name == "torch":
        if _steps is None:
            _steps = _OptimizerSteps(module)
    elif name in ("lightning", "pytorch_lightning"):
        from . import lightning

        lightning._auto_install(module)
    elif name == "transformers.trainer":
        from . import transformers

        transformers._auto_install(module)


def _warn(what, error):
    print(
        f"gpuspan: warning: {what} ({type(error).__name__}: {error}); the program runs on "
        "without gpuspan's step spans",
        file=sys.stderr,
    )


def ensure_set_up(torch):
    """Sets gpuspan up for this process unless the program (or a callback) has; returns
    whether it is set up. Under a launcher, the rank measures the device it uses."""
    global _steps
    if gpuspan._telemetry is not None:
        return True
    try:
        gpuspan.init(**_rank_device.init_settings(torch))
    except Exception as error:  # noqa: BLE001 - the program runs on
        _warn("gpuspan could not be set up", error)
        if _steps is not None:
            _steps.off()
        return False
    gpuspan._set_up_by_bootstrap = True
    return True


class _OptimizerSteps:
    """One ``step`` span per optimizer step, from PyTorch's global hooks."""

    def __init__(self, torch):
        self._torch = torch
        self._handles = []
        self._span = None  # the open step: a gpuspan.Span entered once
        self._active = None
        self._parent = None  # the gpuspan span open when the step opened
        self._index = 0
        self._figures = None  # ml.*.bytes of the first optimizer, read once
        self._failed = False
        from torch.nn.modules import module as nn_module
        from torch.optim import optimizer

        self._nn_module = nn_module
        self._handles = [
            optimizer.register_optimizer_step_pre_hook(self._before_optimizer),
            optimizer.register_optimizer_step_post_hook(self._after_optimizer),
        ]
        self._first_forward_handle = None
        self._watch_forward()
        self._phases = None
        if _native.torch_phases():
            # After the step hooks: a step opens before its first phase.
            self._phases = _phases.attach_everywhere(torch)
            self._handles.extend(self._phases.handles)
        _claim.on_claim(self._abandon)
        gpuspan._before_end = self._span_ending
        gpuspan._set_up_for_span = self._set_up_for_span
        gpuspan._before_epoch = self._epoch_opening
        self._previous_excepthook = sys.excepthook
        sys.excepthook = self._excepthook
        self._exit_hook = False
        self._history = None

    def off(self):
        """Removes the hooks (after a failure)."""
        self._failed = True
        if gpuspan._before_end == self._span_ending:
            gpuspan._before_end = None
        if gpuspan._set_up_for_span == self._set_up_for_span:
            gpuspan._set_up_for_span = None
        if gpuspan._before_epoch == self._epoch_opening:
            gpuspan._before_epoch = None
        for handle in self._handles:
            handle.remove()
        self._handles = []
        self._first_forward_handle = None

    def _watch_forward(self):
        """Opens the next step at the next forward pass with gradients (the hook removes
        itself once a step is open)."""
        if self._first_forward_handle is None and not self._failed:
            handle = self._nn_module.register_module_forward_pre_hook(self._first_forward)
            self._first_forward_handle = handle
            self._handles.append(handle)

    def _stop_watching_forward(self):
        handle, self._first_forward_handle = self._first_forward_handle, None
        if handle is not None:
            handle.remove()
            self._handles.remove(handle)

    def _mine(self):
        """Whether the optimizer hooks open the steps now (no framework or user does)."""
        if self._failed or _claim._owner is not None:
            return False
        current = gpuspan._current.get()
        if current is not None and current is not self._active and current.kind == 1:
            # The program opens its own gpuspan.step spans.
            _claim.claim("user")
            self._abandon()
            return False
        return True

    def _open(self):
        if not ensure_set_up(self._torch):
            return
        if not self._exit_hook:
            # After gpuspan's own exit hook, so that it runs first (atexit runs in reverse).
            atexit.register(self._at_exit)
            self._exit_hook = True
            self._start_history()
        attributes = self._figures or {}
        span = gpuspan.step(self._index, **attributes)
        parent = gpuspan._current.get()
        self._active = span.__enter__()
        self._span = span
        self._parent = parent

    def _start_history(self):
        from . import _memory_history

        try:
            self._history = _memory_history.start(self._torch)
        except Exception as error:  # noqa: BLE001 - the training goes on without it
            _warn("the memory history could not be kept", error)

    def _snapshot_directory(self):
        telemetry = gpuspan._telemetry
        directory = telemetry.diagnosis_dir if telemetry is not None else None
        return directory or os.getcwd()

    def _end(self, error=None):
        if self._phases is not None:
            self._phases.end(error)
        span, self._span, self._active, self._parent = self._span, None, None, None
        if span is not None:
            _spans.end_span(span, error)

    def _abandon(self):
        span, self._span, self._active, self._parent = self._span, None, None, None
        if span is not None:
            # First every phase open in it, the program's own (gpuspan.torch.phases) too.
            _phases.abandon_open()
            span._abandon()

    def _set_up_for_span(self):
        """The program opens a span of its own (an epoch) before the first step: gpuspan
        is set up now, so that the span is recorded. Once only."""
        gpuspan._set_up_for_span = None
        try:
            ensure_set_up(self._torch)
        except Exception as error:  # noqa: BLE001 - never break the program
            _warn("gpuspan could not be set up", error)

    def _span_ending(self, active, error):
        """A gpuspan span is about to end: the step opened inside it ends first. Without
        an error it had no optimizer step in that span, and is dropped; the next forward
        pass opens the next one. An error ends it as an uncaught one would."""
        try:
            if self._span is None or self._parent is not active:
                return
            if error is None or isinstance(error, SystemExit):
                self._abandon()
            else:
                self._failed_with(error)
            self._watch_forward()
        except Exception as failure:  # noqa: BLE001 - never break the program
            _warn("the step hooks failed", failure)
            self.off()

    def _epoch_opening(self):
        """The program opens an epoch while the open step is the current span: that step
        was opened outside any epoch (by a forward pass with gradients before the loop or
        between epochs) and had no optimizer step. It is dropped rather than hold the
        epoch, and the next forward pass opens the next step inside the epoch."""
        try:
            if self._span is None or gpuspan._current.get() is not self._active:
                return
            self._abandon()
            self._watch_forward()
        except Exception as failure:  # noqa: BLE001 - never break the program
            _warn("the step hooks failed", failure)
            self.off()

    def _first_forward(self, module, args):
        try:
            if self._span is None and self._torch.is_grad_enabled() and self._mine():
                self._open()
            if self._failed or _claim._owner is not None or (
                self._span is not None and self._phases is None
            ):
                # Its work is done (or a callback opens the steps): every module call
                # would pay for it. With the phases' hooks it stays, ahead of theirs: a
                # step opens before its first phase, and a hook added later runs after.
                self._stop_watching_forward()
        except Exception as error:  # noqa: BLE001 - never break the program
            _warn("the step hooks failed", error)
            self.off()

    def _before_optimizer(self, optimizer, args, kwargs):
        try:
            if self._span is None and self._mine():
                # No forward pass opened it (a closure, or no nn.Module): it covers the
                # optimizer alone.
                self._open()
        except Exception as error:  # noqa: BLE001
            _warn("the step hooks failed", error)
            self.off()

    def _after_optimizer(self, optimizer, args, kwargs):
        try:
            if self._span is None or not self._mine():
                return
            if self._figures is None:
                self._figures = _torch_figures.model_bytes(optimizer)
                for key, value in self._figures.items():
                    self._active.set_attribute(key, value)
            trace_id = self._active.trace_id
            self._end()
            if self._history is not None:
                self._history.after_step(
                    gpuspan._telemetry, self._index, trace_id, self._snapshot_directory()
                )
            self._index += 1
            self._open()
        except Exception as error:  # noqa: BLE001
            _warn("the step hooks failed", error)
            self.off()

    def _excepthook(self, exc_type, exc, tb):
        try:
            if self._span is not None:
                self._failed_with(exc)
        except Exception as error:  # noqa: BLE001
            _warn("recording the error failed", error)
        self._previous_excepthook(exc_type, exc, tb)

    def _failed_with(self, exc):
        """Ends the open step with ``exc``, an out-of-memory error recorded first."""
        if self._history is not None and _torch_figures.is_out_of_memory(exc):
            self._history.save(
                "oom", self._index, self._active.trace_id, self._snapshot_directory()
            )
        _frameworks.record_if_oom(exc)
        self._end(exc)

    def _at_exit(self):
        # Runs before gpuspan's own exit hook, which was registered earlier. The step open
        # now never reached an optimizer step: it is not a step.
        try:
            self._abandon()
        except Exception:  # noqa: BLE001 - an exit hook must not raise
            pass

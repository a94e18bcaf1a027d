"""gpuspan spans for the Hugging Face Transformers ``Trainer``:
``Trainer(..., callbacks=[GpuspanCallback()])``.

Spans (each with the device memory at its start and end and the peak in between):

- ``epoch`` per training epoch, ``ml.epoch`` = the integer index of the epoch as the
  Trainer counts it (0 for the first; ``state.epoch`` is a float that counts the
  fraction done, so the index is the epoch it is in, also after resuming mid-epoch).
- ``step`` per optimizer step, a child of its epoch, from ``on_step_begin`` (before
  the first micro-batch of the step) to ``on_step_end`` (after the optimizer step), so
  with ``gradient_accumulation_steps=k`` one span covers its k micro-batches.
  ``ml.step = state.global_step`` after the step: 1 for the first optimizer step, the
  step the Trainer's logs, ``eval_steps`` and ``checkpoint-<step>`` folders name.
- ``evaluation`` around each ``Trainer.evaluate`` call, the evaluations the Trainer runs
  while training included.

The Trainer has no hook before an evaluation and none for a failure, so the callback
wraps two of the Trainer's own methods, once, when the first callback is made:
``Trainer.evaluate`` (to open the ``evaluation`` span) and ``Trainer.train`` (when it
raises, the open spans end with the error, status error, and an out-of-memory error is
reported to gpuspan first). The wrappers do nothing for a trainer without a
``GpuspanCallback``. While training runs the callback owns the step spans
(:mod:`gpuspan._claim`). ``gpuspan.init()`` runs at the start of training or evaluation
unless the program already called it.

With ``memory_budget_stop`` (``GPUSPAN_MEMORY_BUDGET_STOP``), a reading over the memory
budget sets ``control.should_training_stop`` at the end of that optimizer step, and says
why in one line on stderr. In a job of several ranks (``torchrun``, ``accelerate launch``)
the ranks decide together and all stop after the same step, the one after the step that
went over (:mod:`gpuspan._job_stop`).

Threading: the Trainer calls the hooks, ``train`` and ``evaluate`` on one thread.
"""

import importlib

from transformers import TrainerCallback

import gpuspan

from . import _claim, _frameworks
from ._job_stop import JobStop
from ._native import names

__all__ = ["GpuspanCallback"]

_OWNER = "transformers"


class GpuspanCallback(TrainerCallback):
    """gpuspan's ``epoch``, ``step`` and ``evaluation`` spans for a ``Trainer`` (see the
    module)."""

    def __init__(self):
        super().__init__()
        _wrap_trainer(importlib.import_module("transformers.trainer").Trainer)
        self._spans = _frameworks.OpenSpans()
        self._last_epoch = None  # the index of the latest epoch span of this training
        self._stop = JobStop()
        self._stopping = False  # said why the training stops

    def __repr__(self):
        return "GpuspanCallback()"

    def on_train_begin(self, args, state, control, **kwargs):
        _frameworks.ensure_init()
        _claim.claim(_OWNER)
        self._last_epoch = None
        self._stop.begin()
        self._stopping = False

    def on_epoch_begin(self, args, state, control, **kwargs):
        index = int(state.epoch or 0)
        # An epoch the Trainer left early (should_epoch_stop) leaves state.epoch behind.
        if self._last_epoch is not None and index <= self._last_epoch:
            index = self._last_epoch + 1
        self._last_epoch = index
        self._spans.open("epoch", gpuspan.epoch(index))

    def on_step_begin(self, args, state, control, **kwargs):
        self._spans.close("step")
        # on_step_end comes after global_step has counted this step.
        self._spans.open("step", gpuspan.step(state.global_step + 1))

    def on_step_end(self, args, state, control, **kwargs):
        self._spans.close("step")
        reason = self._stop.after_step()
        if reason is not None:
            control.should_training_stop = True
            if not self._stopping:
                self._stopping = True
                _frameworks.warn(f"stopping training after step {state.global_step}: {reason}")

    def on_epoch_end(self, args, state, control, **kwargs):
        self._spans.close("epoch")  # and a step the Trainer broke off

    def on_train_end(self, args, state, control, **kwargs):
        self._spans.close_all()
        self._stop.end()
        _claim.release(_OWNER)

    def _failed(self, error):
        _frameworks.record_if_oom(error)
        self._spans.close_all(error)
        self._stop.end()
        _claim.release(_OWNER)


def _callback_of(trainer):
    """The trainer's ``GpuspanCallback``, or ``None``."""
    handler = getattr(trainer, "callback_handler", None)
    for callback in getattr(handler, "callbacks", ()):
        if isinstance(callback, GpuspanCallback):
            return callback
    return None


def _wrap_trainer(trainer_class):
    def make_train(original):
        def train(self, *args, **kwargs):
            callback = _callback_of(self)
            if callback is None:
                return original(self, *args, **kwargs)
            try:
                return original(self, *args, **kwargs)
            except BaseException as error:
                callback._failed(error)
                raise

        return train

    def make_evaluate(original):
        def evaluate(self, *args, **kwargs):
            if _callback_of(self) is None:
                return original(self, *args, **kwargs)
            _frameworks.ensure_init()
            with gpuspan.span(names.EVALUATION):
                return original(self, *args, **kwargs)

        return evaluate

    _frameworks.wrap_once(trainer_class, "train", make_train)
    _frameworks.wrap_once(trainer_class, "evaluate", make_evaluate)


def _auto_install(framework_module):
    """Makes every ``Trainer`` created from now on get one ``GpuspanCallback`` (through
    ``Trainer.add_callback``, after the Trainer's own ``__init__``) unless the program
    passed one. ``framework_module`` is ``transformers`` or ``transformers.trainer``, just
    imported. Never raises: a failure prints one warning line and changes nothing."""
    _frameworks.auto_install("Transformers", _install)


def _install():
    trainer_class = importlib.import_module("transformers.trainer").Trainer

    def make_init(original):
        def __init__(self, *args, **kwargs):
            original(self, *args, **kwargs)
            _frameworks.auto_install("Transformers", lambda: _add_callback(self))

        return __init__

    _wrap_trainer(trainer_class)
    _frameworks.wrap_once(trainer_class, "__init__", make_init)


def _add_callback(trainer):
    if _callback_of(trainer) is None:
        trainer.add_callback(GpuspanCallback())

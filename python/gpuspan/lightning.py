"""gpuspan spans for PyTorch Lightning: ``Trainer(callbacks=[GpuspanCallback()])``.

Spans (each with the device memory at its start and end and the peak in between):

- ``epoch`` per training epoch, ``ml.epoch = trainer.current_epoch``.
- ``step`` per optimizer step, a child of its epoch: it opens at the start of the first
  batch of the step and ends after the batch in which the optimizer stepped, so with
  ``accumulate_grad_batches=k`` one step span covers its k batches.
  ``ml.step = trainer.global_step`` as the step begins: 0 for the first optimizer step,
  the value ``self.global_step`` has in ``training_step`` and the step Lightning's
  loggers record the step's metrics at.
- ``validation`` per validation loop (a child of the epoch it runs in, or of nothing for
  ``trainer.validate``), ``test`` per ``trainer.test`` and ``predict`` per
  ``trainer.predict``.
- ``sanity_check`` for the validation batches Lightning runs before training: no
  ``validation`` span, so that there is one ``validation`` per real validation loop, but
  its memory (which can be the first to overflow) is kept.

While training runs the callback owns the step spans (:mod:`gpuspan._claim`). Lightning
replaces SIGTERM's handler while it runs and puts back the default when it is done; the
callback's ``teardown`` then gives SIGTERM back to gpuspan's flush. When the
trainer fails, the open spans end with the error (status error), and an out-of-memory
error is reported to gpuspan first. ``gpuspan.init()`` runs at the first hook unless
the program already called it.

The class subclasses the ``Callback`` of the Lightning package the program uses
(``lightning.pytorch``, or the older ``pytorch_lightning``); importing this module
imports neither until ``GpuspanCallback`` is looked up.

With ``memory_budget_stop`` (``GPUSPAN_MEMORY_BUDGET_STOP``), a reading over the memory
budget sets ``trainer.should_stop`` at the end of that optimizer step (Lightning then ends
the fit after it), and says why in one line on stderr. In a job of several ranks (DDP,
FSDP) the ranks decide together and all stop after the same step, the one after the step
that went over (:mod:`gpuspan._job_stop`).

Threading: Lightning calls the hooks on its training thread.
"""

import importlib
import sys

import gpuspan

from . import _claim, _frameworks
from ._job_stop import JobStop
from ._native import names

__all__ = ["GpuspanCallback"]  # noqa: F822 - made by __getattr__, below

_OWNER = "lightning"
_PACKAGES = ("lightning.pytorch", "pytorch_lightning")
_classes = {}  # package name -> the GpuspanCallback class built on its Callback


class _Hooks:
    """The hooks, mixed into the ``Callback`` of a Lightning package."""

    def __init__(self):
        super().__init__()
        self._spans = _frameworks.OpenSpans()
        self._step_began_at = None  # trainer.global_step when the open step span began
        self._stop = JobStop()
        self._stopping = False  # said why the training stops

    def __repr__(self):
        return "GpuspanCallback()"

    def setup(self, trainer, pl_module, stage):
        _frameworks.ensure_init()

    def teardown(self, trainer, pl_module, stage):
        # Lightning has just put back SIGTERM's handler as Python saw it, the default.
        gpuspan._resume_flush_on_sigterm()

    def on_train_start(self, trainer, pl_module):
        _claim.claim(_OWNER)
        self._stop.begin()
        self._stopping = False

    def on_train_epoch_start(self, trainer, pl_module):
        self._spans.open("epoch", gpuspan.epoch(trainer.current_epoch))

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if not self._spans.is_open("step"):
            self._step_began_at = trainer.global_step
            self._spans.open("step", gpuspan.step(trainer.global_step))

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        # Without an optimizer step (accumulating, or a skipped batch) the step goes on.
        if trainer.global_step != self._step_began_at:
            self._spans.close("step")
            reason = self._stop.after_step()
            if reason is not None:
                trainer.should_stop = True
                if not self._stopping:
                    self._stopping = True
                    _frameworks.warn(
                        f"stopping training after step {self._step_began_at}: {reason}"
                    )

    def on_train_epoch_end(self, trainer, pl_module):
        self._spans.close("epoch")  # and a step still open in it

    def on_train_end(self, trainer, pl_module):
        self._spans.close_all()
        self._stop.end()
        _claim.release(_OWNER)

    def on_sanity_check_start(self, trainer, pl_module):
        self._spans.open(names.SANITY_CHECK, gpuspan.span(names.SANITY_CHECK))

    def on_sanity_check_end(self, trainer, pl_module):
        self._spans.close(names.SANITY_CHECK)

    def on_validation_start(self, trainer, pl_module):
        if not trainer.sanity_checking:
            self._spans.open(names.VALIDATION, gpuspan.span(names.VALIDATION))

    def on_validation_end(self, trainer, pl_module):
        self._spans.close(names.VALIDATION)

    def on_test_start(self, trainer, pl_module):
        self._spans.open(names.TEST, gpuspan.span(names.TEST))

    def on_test_end(self, trainer, pl_module):
        self._spans.close(names.TEST)

    def on_predict_start(self, trainer, pl_module):
        self._spans.open(names.PREDICT, gpuspan.span(names.PREDICT))

    def on_predict_end(self, trainer, pl_module):
        self._spans.close(names.PREDICT)

    def on_exception(self, trainer, pl_module, exception):
        _frameworks.record_if_oom(exception)
        self._spans.close_all(exception)
        self._stop.end()
        _claim.release(_OWNER)


def _callback_class(package):
    """``GpuspanCallback`` for the Lightning package ``package`` (a module with
    ``Callback`` and ``Trainer``), built once per package."""
    cls = _classes.get(package.__name__)
    if cls is None:
        cls = type(
            "GpuspanCallback",
            (_Hooks, package.Callback),
            {"__module__": __name__, "__doc__": "gpuspan's spans for Lightning (see the module)."},
        )
        _classes[package.__name__] = cls
    return cls


def _package():
    """The Lightning package the program uses: the one it imported, else whichever is
    installed."""
    for name in _PACKAGES:
        if name in sys.modules:
            return sys.modules[name]
    for name in _PACKAGES:
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    raise ImportError(
        "gpuspan.lightning.GpuspanCallback needs PyTorch Lightning: pip install lightning"
    )


def __getattr__(name):
    if name == "GpuspanCallback":
        return _callback_class(_package())
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _auto_install(framework_module):
    """Makes every Lightning ``Trainer`` created from now on get one ``GpuspanCallback``
    unless its ``callbacks`` already hold one. ``framework_module`` is ``lightning``,
    ``lightning.pytorch`` or ``pytorch_lightning``, just imported. Never raises: a failure
    prints one warning line and changes nothing."""
    _frameworks.auto_install("Lightning", lambda: _install(framework_module))


def _install(framework_module):
    name = framework_module.__name__
    package = (
        importlib.import_module("lightning.pytorch") if name == "lightning" else framework_module
    )
    cls = _callback_class(package)

    def make_init(original):
        # Lightning's Trainer takes keyword arguments only; through `callbacks` the callback
        # goes where Lightning puts the program's own (checkpointing still runs last).
        def __init__(self, *args, **kwargs):
            _frameworks.auto_install(
                "Lightning",
                lambda: kwargs.update(
                    callbacks=_with_callback(kwargs.get("callbacks"), package, cls)
                ),
            )
            original(self, *args, **kwargs)

        return __init__

    _frameworks.wrap_once(package.Trainer, "__init__", make_init)


def _with_callback(callbacks, package, cls):
    """The program's ``callbacks`` argument plus one ``cls()``, unless one is there."""
    if callbacks is None:
        callbacks = []
    elif isinstance(callbacks, package.Callback):
        callbacks = [callbacks]
    if any(isinstance(c, _Hooks) for c in callbacks):
        return callbacks
    return [*callbacks, cls()]

"""``forward``, ``backward`` and ``optimizer`` spans inside a step, from PyTorch's hooks.

The three phases are cut where the training thread passes the hooks: ``forward`` from a
forward pass's start to its end; ``backward`` from there to the next forward pass (gradient
accumulation) or the optimizer step, so it holds the loss and gradient clipping too;
``optimizer`` around ``optimizer.step()``. Autograd may run the backward pass on threads of
its own (one per CUDA device), where a span of the training thread cannot end, which is why
the training thread's own events bound it. Each phase is a gpuspan span: its own exact peak.
"""

import weakref
from threading import get_ident

import gpuspan

from ._native import names
from ._spans import end_span

FORWARD, BACKWARD, OPTIMIZER = names.FORWARD, names.BACKWARD, names.OPTIMIZER

# Every set of phases, so that a step dropped with a phase still open in it drops that phase
# too: left open, the phase would stay the thread's current span, and hold whatever the
# program opens next (the next epoch) inside the dropped step.
_every = weakref.WeakSet()


class Phases:
    """The open phase of one training loop, moved along by its hooks."""

    def __init__(self, grad_enabled=None):
        self._grad_enabled = grad_enabled or (lambda: True)
        self._span = None
        self._name = None
        self._depth = 0  # nested module calls, for hooks on every module
        self._thread = None  # the training thread: DataParallel runs replicas on others
        self.handles = []
        _every.add(self)

    def _enter(self, name):
        self._leave()
        span = gpuspan.span(name)
        span.__enter__()
        self._span, self._name = span, name

    def _leave(self, error=None):
        span, self._span, self._name = self._span, None, None
        if span is not None:
            end_span(span, error)

    # Hooks on one module (the model): called once per forward pass.
    def forward_started(self, module, args):
        self._enter(FORWARD)

    def forward_ended(self, module, args, output):
        if self._name == FORWARD:
            self._enter(BACKWARD)

    # Hooks on every module: only the outermost call with gradients enabled counts
    # (evaluation under torch.no_grad() is not a training step's forward pass).
    def any_forward_started(self, module, args):
        if not self._on_training_thread():
            return
        self._depth += 1
        if self._depth == 1 and self._grad_enabled():
            self._enter(FORWARD)

    def any_forward_ended(self, module, args, output):
        if not self._on_training_thread():
            return
        self._depth = max(self._depth - 1, 0)
        if self._depth == 0 and self._name == FORWARD:
            self._enter(BACKWARD)

    def _on_training_thread(self):
        ident = get_ident()
        if self._thread is None:
            self._thread = ident
        return ident == self._thread

    def optimizer_started(self, optimizer, args, kwargs):
        self._depth = 0
        self._enter(OPTIMIZER)

    def optimizer_ended(self, optimizer, args, kwargs):
        if self._name == OPTIMIZER:
            self._leave()

    def end(self, error=None):
        """Ends the open phase (before its step ends)."""
        self._leave(error)

    def abandon(self):
        """Drops the open phase unexported, with the step it is in, if this thread opened
        it (only that thread can)."""
        span = self._span
        if span is None or not any(entry[1] == get_ident() for entry in span._open):
            return
        self._span, self._name = None, None
        span._abandon()

    def remove(self):
        for handle in self.handles:
            handle.remove()
        self.handles = []


def abandon_open():
    """Drops every phase this thread has open, unexported: the step they are in is dropped."""
    for phases in list(_every):
        phases.abandon()


def _hooked(phases, forward_pre, forward, step_pre, step_post, started, ended):
    """``phases``, moved along by ``started`` and ``ended`` registered with the forward hook
    functions and by its optimizer hooks registered with the step hook functions."""
    phases.handles = [forward_pre(started), forward(ended, always_call=True)]
    phases.handles += [step_pre(phases.optimizer_started), step_post(phases.optimizer_ended)]
    return phases


def attach(model, optimizer):
    """Phases of the steps that train ``model`` with ``optimizer``."""
    phases = Phases()
    forward = model.register_forward_pre_hook, model.register_forward_hook
    step = optimizer.register_step_pre_hook, optimizer.register_step_post_hook
    return _hooked(phases, *forward, *step, phases.forward_started, phases.forward_ended)


def attach_everywhere(torch):
    """Phases of every model and optimizer, from PyTorch's global hooks (each module call
    passes two more Python calls: the price of not knowing the model)."""
    from torch.nn.modules import module as nn_module
    from torch.optim import optimizer

    phases = Phases(torch.is_grad_enabled)
    forward = nn_module.register_module_forward_pre_hook, nn_module.register_module_forward_hook
    step = optimizer.register_optimizer_step_pre_hook, optimizer.register_optimizer_step_post_hook
    return _hooked(phases, *forward, *step, phases.any_forward_started, phases.any_forward_ended)

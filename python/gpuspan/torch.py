"""PyTorch: the phases of a training step, and what the step holds, read from its tensors.

``phases(model, optimizer)`` adds ``forward``, ``backward`` and ``optimizer`` child spans
to the steps that train ``model`` (``GPUSPAN_TORCH_PHASES=1`` does it for every model under
``gpuspan run``).

``model_bytes(optimizer)`` gives the three figures gpuspan puts on every step span of a
PyTorch program under ``gpuspan run``: ``ml.params.bytes`` (the parameters the optimizer
updates), ``ml.grads.bytes`` (their gradients) and ``ml.optimizer_state.bytes`` (Adam's
moments, momentum buffers, ...). They are exact: the sum of each tensor's ``numel() *
element_size()``, each storage counted once.
"""

from ._native import names

PARAMS = names.ML_PARAMS_BYTES
GRADS = names.ML_GRADS_BYTES
OPTIMIZER_STATE = names.ML_OPTIMIZER_STATE_BYTES


def phases(model, optimizer):
    """Opens a ``forward`` span around each forward pass of ``model``, a ``backward`` span
    from its end to the next forward pass or ``optimizer.step()``, and an ``optimizer``
    span around ``optimizer.step()``, each with its own exact peak; returns a handle whose
    ``remove()`` takes the hooks off. Module and optimizer hooks only: no code of yours is
    wrapped."""
    from ._phases import attach

    return attach(model, optimizer)


def _tensor_bytes(tensor, seen):
    """A tensor's bytes, unless a tensor sharing its storage was counted already."""
    try:
        key = (tensor.untyped_storage().data_ptr(), tensor.device)
    except (AttributeError, RuntimeError):
        key = id(tensor)
    if key in seen:
        return 0
    seen.add(key)
    return tensor.numel() * tensor.element_size()


def model_bytes(optimizer):
    """``{"ml.params.bytes": ..., "ml.grads.bytes": ..., "ml.optimizer_state.bytes": ...}``
    for the parameters ``optimizer`` updates, read from the tensors now."""
    import torch

    params, grads, state = set(), set(), set()
    figures = {PARAMS: 0, GRADS: 0, OPTIMIZER_STATE: 0}
    for group in optimizer.param_groups:
        for param in group["params"]:
            figures[PARAMS] += _tensor_bytes(param, params)
            if param.grad is not None:
                figures[GRADS] += _tensor_bytes(param.grad, grads)
    for values in optimizer.state.values():
        for value in values.values() if isinstance(values, dict) else ():
            if isinstance(value, torch.Tensor):
                figures[OPTIMIZER_STATE] += _tensor_bytes(value, state)
    return figures


def is_out_of_memory(error):
    """Whether ``error`` is a device out-of-memory error of PyTorch's
    (``torch.cuda.OutOfMemoryError``, or a ``RuntimeError`` saying "out of memory")."""
    import sys

    torch = sys.modules.get("torch")
    oom = getattr(getattr(torch, "cuda", None), "OutOfMemoryError", None) if torch else None
    if oom is not None and isinstance(error, oom):
        return True
    # Host memory errors (MemoryError) are not the GPU's.
    return isinstance(error, RuntimeError) and "out of memory" in str(error).lower()

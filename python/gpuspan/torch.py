"""PyTorch: the phases of a training step, and what the step holds, read from its tensors.

``phases(model, optimizer)`` adds ``forward``, ``backward`` and ``optimizer`` child spans
to the steps that train ``model`` (``GPUSPAN_TORCH_PHASES=1`` does it for every model under
``gpuspan run``).

``model_bytes(optimizer)`` gives the three figures gpuspan puts on every step span of a
PyTorch program under ``gpuspan run``: ``ml.params.bytes`` (the parameters the optimizer
updates), ``ml.grads.bytes`` (their gradients) and ``ml.optimizer_state.bytes`` (Adam's
moments, momentum buffers, ...). Each is the memory its tensors hold, every byte counted
once however many tensors view it (see :func:`model_bytes`).
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


def model_bytes(optimizer):
    """``{"ml.params.bytes": ..., "ml.grads.bytes": ..., "ml.optimizer_state.bytes": ...}``
    for the parameters ``optimizer`` updates, read from the tensors now.

    Each figure is the number of distinct bytes of memory its tensors cover, on whatever
    device they are: views into one buffer (DDP's gradient buckets, FSDP's flat parameters,
    a view and its base) count the union of the byte ranges they cover, not one view per
    buffer nor each view in full. A strided view covers the range from its first element to
    its last, gaps included (the buffer holds them anyway); an expanded one (stride 0), the
    elements it repeats once. A sparse tensor holds its index and value arrays; a tensor subclass that
    wraps others (a DTensor: the shard this rank holds) the tensors it wraps; a tensor on
    the meta device, nothing. A tensor whose memory cannot be located (a fake tensor, a
    subclass that cannot say what it wraps) counts ``numel() * element_size()``. Memory a
    parameter shares with its gradient or the optimizer's state is in each figure it
    belongs to. The optimizer's state counts the tensors in its lists and dicts too
    (LBFGS's history)."""
    import torch

    wraps = _wrapper_check()
    params, grads, state = _Ranges(wraps), _Ranges(wraps), _Ranges(wraps)
    for group in optimizer.param_groups:
        for param in group["params"]:
            params.add(param)
            if param.grad is not None:
                grads.add(param.grad)
    for values in optimizer.state.values():
        for value in values.values() if isinstance(values, dict) else ():
            for tensor in _tensors_in(value, torch.Tensor):
                state.add(tensor)
    return {PARAMS: params.total(), GRADS: grads.total(), OPTIMIZER_STATE: state.total()}


def _tensors_in(value, tensor_type):
    """The tensors of one optimizer state entry: the entry itself, or those in its lists,
    tuples and dicts (LBFGS keeps its history in lists)."""
    if isinstance(value, tensor_type):
        yield value
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _tensors_in(item, tensor_type)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _tensors_in(item, tensor_type)


class _Ranges:
    """The byte ranges some tensors cover, per device; their union's size."""

    def __init__(self, wraps):
        self._wraps = wraps  # whether a tensor holds its data in inner tensors
        self._ranges = {}  # device -> [(start address, end address)]
        self._opaque = 0  # tensors whose memory cannot be located, counted in full

    def add(self, tensor):
        found = []  # (device, start, end), or (None, bytes, 0) for bytes not located
        try:
            _locate(tensor, self._wraps, found)
        except Exception:  # noqa: BLE001 - an unusual tensor must not cost the step spans
            found = [(None, _element_bytes(tensor), 0)]
        for device, start, end in found:
            if device is None:
                self._opaque += start
            else:
                self._ranges.setdefault(device, []).append((start, end))

    def total(self):
        total = self._opaque
        for ranges in self._ranges.values():
            ranges.sort()
            end = None
            for start, stop in ranges:
                if end is None or start >= end:
                    total += stop - start
                    end = stop
                elif stop > end:
                    total += stop - end
                    end = stop
        return total


def _locate(tensor, wraps, found):
    """Appends the byte ranges ``tensor`` covers to ``found``."""
    if tensor.device.type == "meta":
        return
    if wraps(tensor):
        names, _ = tensor.__tensor_flatten__()
        for name in names:
            inner = getattr(tensor, name, None)
            if _is_tensor(inner):
                _locate(inner, wraps, found)
        return
    arrays = _sparse_arrays(tensor)
    if arrays is not None:
        for array in arrays:
            _locate(array, wraps, found)
        return
    if tensor.numel() == 0:
        return
    size = tensor.element_size()
    try:
        start = tensor.data_ptr()
        # The element furthest from the first (strides are never negative in PyTorch).
        last = sum((n - 1) * abs(s) for n, s in zip(tensor.shape, tensor.stride()))
    except (RuntimeError, NotImplementedError):
        start = 0
    if start == 0:
        # No address to compare (a fake tensor, an opaque layout): its elements' bytes.
        found.append((None, tensor.numel() * size, 0))
    else:
        found.append((tensor.device, start, start + (last + 1) * size))


def _wrapper_check():
    """Tells whether a tensor is a subclass that holds its data in inner tensors (DTensor)."""
    try:
        from torch.utils._python_dispatch import is_traceable_wrapper_subclass
    except ImportError:  # a PyTorch without wrapper subclasses
        return lambda tensor: False
    return is_traceable_wrapper_subclass


def _element_bytes(tensor):
    """``numel() * element_size()``, or 0 when the tensor cannot say."""
    try:
        return tensor.numel() * tensor.element_size()
    except Exception:  # noqa: BLE001
        return 0


def _is_tensor(value):
    import torch

    return isinstance(value, torch.Tensor)


def _sparse_arrays(tensor):
    """The index and value arrays of a sparse tensor; ``None`` for a strided one."""
    import torch

    layout = tensor.layout
    if layout == torch.strided:
        return None
    if layout == torch.sparse_coo:
        return (tensor._indices(), tensor._values())
    if layout in (torch.sparse_csr, torch.sparse_bsr):
        return (tensor.crow_indices(), tensor.col_indices(), tensor.values())
    if layout in (torch.sparse_csc, torch.sparse_bsc):
        return (tensor.ccol_indices(), tensor.row_indices(), tensor.values())
    return None


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

"""Exact allocator peaks per span, from the allocator's own peak counter.

A caching allocator (PyTorch's) keeps one peak counter per device. A peak stack gives
every open span its own exact peak from that single counter: when a span opens, the
counter's peak so far is folded into the enclosing span and the counter is reset; when it
closes, its peak (the counter, and what its children folded in) is folded into the
enclosing span. A span that closes while spans opened after it are still open (interleaved
asyncio tasks) also takes in what those hold so far. No sampling: an allocation that lives
for a microsecond is in the peak.
"""


class Allocator:
    """What ``gpuspan.init(allocator=...)`` takes, for allocators other than PyTorch's.

    ``read()`` returns ``(allocated, reserved, peak_allocated, peak_reserved)`` in bytes,
    the peaks since the last ``reset_peak()``; ``reset_peak()`` sets both peaks to the
    current values.
    """

    def read(self):
        raise NotImplementedError

    def reset_peak(self):
        raise NotImplementedError


class _TorchAllocator(Allocator):
    """One of PyTorch's caching allocators on one device (the current one when opened):
    ``backend`` is ``torch.cuda`` or ``torch.xpu``, whose statistics have the same keys."""

    def __init__(self, backend, raw, device):
        self._device = backend.current_device() if device is None else device
        self._reset = backend.reset_peak_memory_stats
        # The raw nested statistics: one C++ call, without memory_stats()'s flattening.
        if raw is not None:
            self._raw = raw
        else:
            self._raw = None
            self._stats = backend.memory_stats

    def read(self):
        if self._raw is not None:
            stats = self._raw(self._device)
            allocated = stats["allocated_bytes"]["all"]
            reserved = stats["reserved_bytes"]["all"]
            return (
                allocated["current"],
                reserved["current"],
                allocated["peak"],
                reserved["peak"],
            )
        stats = self._stats(self._device)
        return (
            stats.get("allocated_bytes.all.current", 0),
            stats.get("reserved_bytes.all.current", 0),
            stats.get("allocated_bytes.all.peak", 0),
            stats.get("reserved_bytes.all.peak", 0),
        )

    def reset_peak(self):
        self._reset(self._device)


class TorchCudaAllocator(_TorchAllocator):
    """PyTorch's CUDA caching allocator on one device (the current one when opened); on a
    ROCm build of torch, HIP's."""

    def __init__(self, torch, device=None):
        raw = getattr(getattr(torch, "_C", None), "_cuda_memoryStats", None)
        super().__init__(torch.cuda, raw, device)


class TorchXpuAllocator(_TorchAllocator):
    """PyTorch's XPU caching allocator (Intel GPUs) on one device (the current one when
    opened): the figures of ``torch.xpu.memory_allocated``, ``max_memory_allocated``,
    ``memory_reserved`` and ``max_memory_reserved``."""

    def __init__(self, torch, device=None):
        raw = getattr(getattr(torch, "_C", None), "_xpu_memoryStats", None)
        super().__init__(torch.xpu, raw, device)


def torch_allocator(torch):
    """The allocator of the device kind torch computes on: CUDA's (HIP's on ROCm) once CUDA
    is initialised, else XPU's once XPU is; ``None`` before either."""
    if torch.cuda.is_initialized():
        return TorchCudaAllocator(torch)
    xpu = getattr(torch, "xpu", None)
    is_initialized = getattr(xpu, "is_initialized", None)
    if is_initialized is not None and is_initialized():
        return TorchXpuAllocator(torch)
    return None


class _Frame:
    __slots__ = ("allocated", "reserved", "peak_allocated", "peak_reserved")

    def __init__(self, allocated, reserved):
        self.allocated = allocated
        self.reserved = reserved
        self.peak_allocated = allocated
        self.peak_reserved = reserved


class PeakStack:
    """The open spans' allocator frames, innermost last."""

    def __init__(self, allocator):
        self.allocator = allocator
        self._frames = []

    def open(self):
        allocated, reserved, peak_allocated, peak_reserved = self.allocator.read()
        if self._frames:
            _fold(self._frames[-1], peak_allocated, peak_reserved)
        self.allocator.reset_peak()
        frame = _Frame(allocated, reserved)
        self._frames.append(frame)
        return frame

    def close(self, frame):
        """Pops ``frame`` and returns ``(allocated start, end, peak, reserved start, end,
        peak)`` for its span."""
        allocated, reserved, peak_allocated, peak_reserved = self.allocator.read()
        _fold(frame, max(peak_allocated, allocated), max(peak_reserved, reserved))
        frames = self._frames
        # Usually the innermost; spans of interleaved asyncio tasks may close out of order.
        i = len(frames) - 1
        while i >= 0 and frames[i] is not frame:
            i -= 1
        if i >= 0:
            # Closed before spans opened after it (interleaved asyncio tasks): what those
            # still-open frames hold so far happened while this span was open too.
            for above in frames[i + 1 :]:
                _fold(frame, above.peak_allocated, above.peak_reserved)
            del frames[i]
            if i > 0:
                _fold(frames[i - 1], frame.peak_allocated, frame.peak_reserved)
        return (
            frame.allocated,
            allocated,
            frame.peak_allocated,
            frame.reserved,
            reserved,
            frame.peak_reserved,
        )


def _fold(frame, peak_allocated, peak_reserved):
    if peak_allocated > frame.peak_allocated:
        frame.peak_allocated = peak_allocated
    if peak_reserved > frame.peak_reserved:
        frame.peak_reserved = peak_reserved

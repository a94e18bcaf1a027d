"""GPU memory on OpenTelemetry, for people who train models.

``gpuspan.init()`` starts the gpuspan Rust core (a sampler thread reading every GPU every
few milliseconds, and the exporters); ``with gpuspan.epoch(e):`` and
``with gpuspan.step(s):`` open spans that record the memory at their start and end and the
peak reached while they were open. The spans are the Rust crate's own, so they carry the
same attributes and go to the same places (an OTLP collector, or ``gpuspan-runs/<run-id>/``).
"""

import atexit
import contextvars
import functools
import inspect
import signal
import sys
import threading

from . import _native
from ._allocator import Allocator, PeakStack, TorchCudaAllocator, TorchXpuAllocator, torch_allocator
from ._diff import Diff, diff
from ._otel import load as _load_otel
from ._report import Report, report

__all__ = [
    "Allocator",
    "Diff",
    "Report",
    "Span",
    "Telemetry",
    "TorchCudaAllocator",
    "TorchXpuAllocator",
    "diff",
    "epoch",
    "init",
    "record_allocator",
    "record_oom",
    "report",
    "span",
    "step",
]

__version__ = _native.__version__

Telemetry = _native.Telemetry

_EPOCH, _STEP, _OTHER = 0, 1, 2

# The open gpuspan span of this thread or asyncio task: the parent of the next one.
_current = contextvars.ContextVar("gpuspan_current_span", default=None)

_telemetry = None
# Whether init() was asked to flush on SIGTERM (flush_on_signal).
_flush_on_sigterm_asked = False
# Set when gpuspan run's bootstrap set gpuspan up, so that the program's own init() keeps it.
_set_up_by_bootstrap = False
# The parent of spans opened outside any other: TRACEPARENT's context, where set.
_root = None
# "auto": PyTorch's CUDA allocator once CUDA is initialised; None: off; else an Allocator.
_allocator_choice = "auto"
_peaks = None
_otel = None
# Told of each span about to end, with the exception ending it (or None): gpuspan run's
# optimizer hooks, so that a step they opened inside it does not outlive it.
_before_end = None
# Under gpuspan run, sets gpuspan up when the program opens a span before the first step.
_set_up_for_span = None
# Told before the program opens an epoch: gpuspan run's optimizer hooks, so that a step they
# opened outside any epoch does not hold it.
_before_epoch = None
_open_span = _native.open_span
_get_ident = threading.get_ident
_modules = sys.modules


def init(**settings):
    """Sets gpuspan up and installs it for this process; returns the :class:`Telemetry`.

    Settings not given come from the same environment variables as the Rust crate
    (``OTEL_EXPORTER_OTLP_ENDPOINT``, ``GPUSPAN_SAMPLE_INTERVAL``, ...); a keyword beats its
    variable. ``allocator`` chooses the allocator whose peaks spans record: ``"auto"``
    (PyTorch's CUDA allocator when CUDA is in use), ``None`` (off), or an object with
    ``read()`` and ``reset_peak()`` (see :class:`Allocator`).

    Raises ``ValueError`` for a setting or variable that does not parse (the message names
    it), ``TypeError`` for an unknown keyword, ``RuntimeError`` when gpuspan is already set
    up in this process or an exporter cannot start.
    """
    global _telemetry, _allocator_choice, _peaks, _root, _flush_on_sigterm_asked
    if _set_up_by_bootstrap and _telemetry is not None:
        print(
            "gpuspan: warning: gpuspan.init() is called after gpuspan run's bootstrap set "
            "gpuspan up for this PyTorch program; the program keeps that setup (configure "
            "it with GPUSPAN_* and OTEL_* variables)",
            file=sys.stderr,
        )
        return _telemetry
    choice = settings.pop("allocator", "auto")
    if choice is False:
        choice = None
    if not (choice is None or choice == "auto" or _is_allocator(choice)):
        raise TypeError(
            "gpuspan.init(allocator=...) takes \"auto\", None, or an object with read() and "
            f"reset_peak() methods; got {choice!r}"
        )
    # Ctrl-C stays Python's KeyboardInterrupt: the `with` blocks end the open spans and the
    # exit hook flushes. SIGTERM is the core's (see _flush_on_sigterm).
    flush_on_signal = settings.pop("flush_on_signal", True)
    if not isinstance(flush_on_signal, bool):
        raise ValueError(f"gpuspan.init(flush_on_signal={flush_on_signal!r}): expected True or False")
    settings["flush_on_signal"] = False
    telemetry = _native.init(settings)
    if flush_on_signal:
        _flush_on_sigterm(telemetry)
    _flush_on_sigterm_asked = flush_on_signal
    first = _telemetry is None
    _telemetry = telemetry
    _root = _traceparent()
    _allocator_choice = choice
    _peaks = PeakStack(choice) if _is_allocator(choice) else None
    if first:
        atexit.register(_shutdown_at_exit)
    return telemetry


def _keyword_docs():
    """``init``'s keywords as its docstring lists them: one entry per row of the crate's
    settings table, with its variable, its one-line doc and its default."""
    entries = []
    for name, variable, doc, default in _native.SETTING_DOCS:
        head = f"{name} ({variable})" if variable else name
        entries.append(f"    - {head}: {doc} Default: {default}.\n")
    return (
        "\n    Keywords, one per row of the crate's settings table (the variable, then the "
        "default, as\n    the variable writes it):\n\n" + "".join(entries)
    )


init.__doc__ += _keyword_docs()


def _traceparent():
    """``TRACEPARENT`` as a ``(trace_id, span_id, flags)`` parent, or ``None``: a launcher
    (``gpuspan run``) names its span there, and the program's spans nest under it."""
    import os

    parts = os.environ.get("TRACEPARENT", "").strip().split("-")
    if len(parts) < 4 or parts[0] == "ff":
        return None
    try:
        trace_id, span_id, flags = int(parts[1], 16), int(parts[2], 16), int(parts[3], 16)
    except ValueError:
        return None
    if len(parts[1]) != 32 or len(parts[2]) != 16 or trace_id == 0 or span_id == 0:
        return None
    return (trace_id, span_id, flags & 0xFF)


def _flush_on_sigterm(telemetry):
    """Where the program leaves SIGTERM to its default action, the core's signal thread
    writes the completed spans out (for at most the export timeout) and then lets the
    signal end the process, as it would without gpuspan: also when the program is stuck in
    a C call, swallows every exception, or gets a second SIGTERM meanwhile. Nothing is
    raised in the program. A handler of the program's, installed before or after, decides
    alone (its exit flushes through the exit hook)."""
    if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
        telemetry.flush_on_sigterm()


def _resume_flush_on_sigterm():
    """Flushes on SIGTERM again after a framework put back what Python saw as SIGTERM's
    handler, the default (Lightning does when a fit ends): `signal.signal` replaced
    gpuspan's."""
    if _flush_on_sigterm_asked and _telemetry is not None and not _telemetry.is_shut_down:
        _flush_on_sigterm(_telemetry)


def _is_allocator(obj):
    return callable(getattr(obj, "read", None)) and callable(getattr(obj, "reset_peak", None))


def _shutdown_at_exit():
    telemetry = _telemetry
    if telemetry is None or telemetry.is_shut_down:
        return
    # The core prints the summary table: let what Python printed come first.
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - a closed stream at exit
            pass
    try:
        telemetry.shutdown()
    except Exception as error:  # noqa: BLE001 - an exit hook must not raise
        print(f"gpuspan: {error}", file=sys.stderr)


def record_allocator(allocated, reserved):
    """Records a framework allocator's counters in bytes (for frameworks other than
    PyTorch): spans open now record the highest values as ``gpu.allocator.allocated.peak``
    and ``gpu.allocator.reserved.peak``."""
    _native.record_allocator(allocated, reserved)


def record_oom(message="out of memory"):
    """Records an out-of-memory error the program caught (``torch.cuda.OutOfMemoryError``):
    the event ``gpu.memory.oom`` on the innermost open span, and the last seconds of memory
    with every open span in ``near-oom-<time>.json`` in the run directory. Returns once that
    file is written (at most 5 s)."""
    _native.record_oom(str(message))


def _peak_stack():
    """The allocator peak stack, resolving ``"auto"`` once PyTorch has initialised CUDA
    (or HIP) or XPU."""
    global _peaks
    if _peaks is None and _allocator_choice == "auto":
        torch = sys.modules.get("torch")
        allocator = None if torch is None else torch_allocator(torch)
        if allocator is not None:
            _peaks = PeakStack(allocator)
    return _peaks


def _interop():
    """The OpenTelemetry interop once the program has imported the API, else ``None``."""
    global _otel
    if _otel is None:
        _otel = _load_otel()
    return _otel


class Span:
    """A gpuspan span: a context manager (``with``, ``async with``) and a decorator.

    Each ``with`` opens a new span and ends it at the end of the block, on the thread that
    opened it; ending it on another thread raises ``RuntimeError``. As a decorator, every
    call runs in its own span.
    """

    __slots__ = ("_kind", "_index", "_name", "_attributes", "_open")

    def __init__(self, kind, index, name, attributes):
        self._kind = kind
        self._index = index
        self._name = name
        self._attributes = attributes or None
        self._open = []

    def __repr__(self):
        return f"gpuspan.Span({self._name!r})"

    def __enter__(self):
        # Module lookups inlined: this runs on every training step.
        if _telemetry is None and _set_up_for_span is not None:
            _set_up_for_span()
        if self._kind == _EPOCH and _before_epoch is not None:
            _before_epoch()
        mine = _current.get()
        if mine is None:
            mine = _root
        otel = _otel
        if otel is None and "opentelemetry.trace" in _modules:
            otel = _interop()
        parent = mine if otel is None else otel.parent(mine)
        active = _open_span(self._kind, self._index, self._name, self._attributes, parent)
        peaks = _peaks
        if peaks is None and "torch" in _modules and _allocator_choice == "auto":
            peaks = _peak_stack()
        try:
            frame = peaks.open() if peaks is not None else None
        except BaseException as error:
            active.end(None, f"allocator: {type(error).__name__}: {error}")
            raise
        token = _current.set(active)
        attached = otel.enter(active) if otel is not None and active.valid else None
        self._open.append((active, _get_ident(), token, otel, attached, peaks, frame))
        return active

    def __exit__(self, exc_type, exc, tb):
        entries = self._open
        if not entries:
            raise RuntimeError(f"gpuspan span {self._name!r} is not open")
        # The latest entry opened on this thread (one Span object may be entered by
        # several threads at once).
        ident = _get_ident()
        i = len(entries) - 1
        while entries[i][1] != ident:
            i -= 1
            if i < 0:
                # The core's own check raises the error, before anything is touched.
                entries[-1][0].end()
                raise RuntimeError(f"gpuspan span {self._name!r} is not open on this thread")
        active, _, token, otel, attached, peaks, frame = entries.pop(i)
        error = None if exc_type is None else _describe(exc_type, exc)
        figures = None
        try:
            before_end = _before_end
            try:
                if before_end is not None:
                    before_end(active, exc)
            except BaseException as interruption:  # a Ctrl-C landing here ends the span too
                error = _describe(type(interruption), interruption)
                raise
            if frame is not None:
                figures = peaks.close(frame)
        finally:
            # The span ends and stops being current even if the allocator failed.
            try:
                active.end(figures, error)
            finally:
                if attached is not None:
                    otel.detach(attached)
                try:
                    _current.reset(token)
                except ValueError:  # exited in another asyncio task: nothing to undo
                    pass
        return False

    def _abandon(self):
        """Closes the span this thread opened last without exporting it (a step opened
        ahead of an optimizer step that never came)."""
        entries = self._open
        ident = _get_ident()
        for i in range(len(entries) - 1, -1, -1):
            if entries[i][1] == ident:
                break
        else:
            return
        active, _, token, otel, attached, peaks, frame = entries.pop(i)
        try:
            if frame is not None:
                peaks.close(frame)
        finally:
            active.abandon()
            if attached is not None:
                otel.detach(attached)
            try:
                _current.reset(token)
            except ValueError:
                pass

    async def __aenter__(self):
        return self.__enter__()

    async def __aexit__(self, exc_type, exc, tb):
        return self.__exit__(exc_type, exc, tb)

    def _fresh(self):
        return Span(self._kind, self._index, self._name, self._attributes)

    def __call__(self, func):
        if inspect.iscoroutinefunction(func):

            @functools.wraps(func)
            async def run_async(*args, **kwargs):
                async with self._fresh():
                    return await func(*args, **kwargs)

            return run_async

        @functools.wraps(func)
        def run(*args, **kwargs):
            with self._fresh():
                return func(*args, **kwargs)

        return run


def _describe(exc_type, exc):
    text = str(exc)
    return f"{exc_type.__name__}: {text}" if text else exc_type.__name__


def epoch(index, **attributes):
    """An ``epoch`` span with ``ml.epoch = index``; keywords become attributes
    (``gpuspan.epoch(3, lr=0.1)``)."""
    return Span(_EPOCH, index, "epoch", attributes)


def step(index, **attributes):
    """A ``step`` span with ``ml.step = index``; keywords become attributes
    (``gpuspan.step(7, batch_size=64)``, which the batch-size fit reads)."""
    return Span(_STEP, index, "step", attributes)


def span(name, **attributes):
    """A span named ``name`` for any other phase (``"eval"``, ``"checkpoint"``)."""
    return Span(_OTHER, 0, str(name), attributes)

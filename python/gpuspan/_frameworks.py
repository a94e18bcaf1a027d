"""What the Lightning and Transformers callbacks share: the spans they hold open across
hooks, the lazy ``gpuspan.init()``, OOM reporting, and the never-raising auto-install.

Threading: a callback's hooks run on the framework's training thread, one at a time; the
spans it opens end on that thread (a :class:`gpuspan.Span` must end where it began).
"""

import functools
import sys

import gpuspan

from . import _rank_device
from ._spans import end_span
from .torch import is_out_of_memory

# Marks a framework method that gpuspan has wrapped, and keeps the original.
_ORIGINAL = "_gpuspan_original"


def ensure_init():
    """Sets gpuspan up with its settings from the environment, unless the program (or
    ``gpuspan run``) already did. A rank computing on a CUDA device measures that device."""
    if gpuspan._telemetry is None:
        gpuspan.init(**_rank_device.init_settings(sys.modules.get("torch")))


class OpenSpans:
    """The spans a callback opened in one hook and ends in a later one, innermost last."""

    def __init__(self):
        self._open = []  # (name, gpuspan.Span)

    def open(self, name, span):
        """Enters ``span`` and keeps it under ``name`` until :meth:`close`."""
        span.__enter__()
        self._open.append((name, span))

    def is_open(self, name):
        return any(n == name for n, _ in self._open)

    def close(self, name, error=None):
        """Ends the span kept under ``name`` (and any opened inside it, first); ``error``,
        an exception, marks them failed. Nothing happens when none is open."""
        if not self.is_open(name):
            return
        while True:
            n, span = self._open.pop()
            end_span(span, error)
            if n == name:
                return

    def close_all(self, error=None):
        """Ends every open span, innermost first; a failure to end one is printed, not
        raised, so that the others still end (this runs while an exception unwinds)."""
        while self._open:
            _, span = self._open.pop()
            try:
                end_span(span, error)
            except Exception as failure:  # noqa: BLE001 - the others must still end
                warn(f"could not end span {span!r}: {failure}")


def stop_reason():
    """Why gpuspan asks the training loop to stop (``memory_forecast_stop``: an OOM
    forecast; ``memory_budget_stop``: a reading over
    the memory budget), or ``None``."""
    telemetry = gpuspan._telemetry
    return None if telemetry is None else telemetry.stop_requested()


def record_if_oom(error):
    """Reports ``error`` to :func:`gpuspan.record_oom` if it is a device out-of-memory
    error, while the spans it happened in are still open; returns whether it was."""
    if not is_out_of_memory(error):
        return False
    gpuspan.record_oom(f"{type(error).__name__}: {error}")
    return True


def warn(message):
    print(f"gpuspan: warning: {message}", file=sys.stderr)


def wrap_once(cls, name, make_wrapper):
    """Replaces ``cls.name`` with ``make_wrapper(original)``, once: a second call leaves
    the wrapped method as it is."""
    original = cls.__dict__.get(name, getattr(cls, name))
    if hasattr(original, _ORIGINAL):
        return
    wrapper = functools.wraps(original)(make_wrapper(original))
    setattr(wrapper, _ORIGINAL, original)
    setattr(cls, name, wrapper)


def auto_install(framework, install):
    """Runs ``install()``; a failure prints one warning line and the program goes on as
    if gpuspan were not there."""
    try:
        install()
    except Exception as error:  # noqa: BLE001 - must never change what the program does
        warn(f"could not add the {framework} callback: {type(error).__name__}: {error}")

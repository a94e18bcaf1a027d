"""Nesting with the program's own OpenTelemetry spans, once it has imported the API.

Inside a gpuspan span, the program's current OpenTelemetry span is a non-recording
"mirror" of it (gpuspan's trace and span ids), so spans the program opens there are its
children. The mirror builds its SpanContext only when something asks for it: a step
costs no more than a context attach and detach when nothing nests inside it.
"""

import contextvars
import sys


def load():
    """The interop, once `opentelemetry.trace` is imported; else ``None``."""
    if "opentelemetry.trace" not in sys.modules:
        return None
    return Interop()


class Interop:
    """The OpenTelemetry API calls a span makes, looked up once."""

    def __init__(self):
        from opentelemetry import context, trace

        self.get_current_span = trace.get_current_span
        self.set_span_in_context = trace.set_span_in_context
        self.attach = context.attach
        self.detach = context.detach
        # The API's default runtime context keeps the context in a ContextVar, under a
        # span key. Reading and setting that variable directly does what get_current_span,
        # set_span_in_context, attach and detach do, at a third of the cost; any other
        # runtime context goes through the API.
        var = getattr(getattr(context, "_RUNTIME_CONTEXT", None), "_current_context", None)
        key = getattr(getattr(trace, "propagation", None), "_SPAN_KEY", None)
        fast = isinstance(var, contextvars.ContextVar) and isinstance(key, str)
        flags = {0: trace.TraceFlags(0), 1: trace.TraceFlags(1)}
        span_context = trace.SpanContext
        trace_state = trace.DEFAULT_TRACE_STATE

        class Mirror(trace.NonRecordingSpan):
            """A gpuspan span, as the current span of OpenTelemetry's API."""

            __slots__ = ("active", "_built")

            def __init__(self, active):  # noqa: D107 - no SpanContext yet
                self.active = active
                self._built = None

            @property
            def _context(self):
                built = self._built
                if built is None:
                    a = self.active
                    built = self._built = span_context(
                        a.trace_id,
                        a.span_id,
                        False,
                        flags.get(a.trace_flags & 1),
                        trace_state,
                    )
                return built

        self.Mirror = Mirror
        if fast:
            self._fast(var, key, context.Context)

    def parent(self, mine):
        """The program's current span: gpuspan's own span, or a ``(trace_id, span_id,
        flags)`` triple for the program's span, or ``mine`` when there is none."""
        current = self.get_current_span()
        if type(current) is self.Mirror:
            return current.active
        context = current.get_span_context()
        if context.is_valid:
            return (context.trace_id, context.span_id, int(context.trace_flags))
        return mine

    def enter(self, active):
        """Makes ``active`` the current span; returns the token for ``detach``."""
        return self.attach(self.set_span_in_context(self.Mirror(active)))

    def _fast(self, var, key, make_context):
        mirror = self.Mirror
        get = var.get

        def parent(mine):
            current = get().get(key)
            if current is None:
                return mine
            if type(current) is mirror:
                return current.active
            context = current.get_span_context()
            if context.is_valid:
                return (context.trace_id, context.span_id, int(context.trace_flags))
            return mine

        def enter(active):
            return var.set(make_context({**get(), key: mirror(active)}))

        def detach(token):
            try:
                var.reset(token)
            except ValueError:  # reset from another context: nothing to undo here
                pass

        self.parent = parent
        self.enter = enter
        self.detach = detach

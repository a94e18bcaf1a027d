"""Who opens this process's ``step`` spans.

Under ``gpuspan run``, the optimizer hooks of :mod:`gpuspan._autorun` open one ``step`` span
per optimizer step. A framework callback (Lightning, Transformers) knows better what a step
is: while it is in charge it claims the steps, and the optimizer hooks open none. A program
that opens its own ``gpuspan.step`` spans claims them too, as ``"user"``.
"""

_owner = None
_listeners = []


def claim(owner):
    """``owner`` (``"lightning"``, ``"transformers"``, ``"user"``) opens the step spans
    from now on; a step the optimizer hooks had opened is dropped first."""
    global _owner
    _owner = owner
    for listener in _listeners:
        listener()


def on_claim(listener):
    """Calls ``listener()`` whenever someone claims the steps."""
    _listeners.append(listener)


def release(owner):
    """``owner`` no longer opens the step spans; the optimizer hooks take them back."""
    global _owner
    if _owner == owner:
        _owner = None


def owner():
    """Who opens the step spans: ``None`` when the optimizer hooks do."""
    return _owner

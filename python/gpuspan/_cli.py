"""The ``gpuspan`` command of the wheel (and ``python -m gpuspan``): runs the Rust command
line in this process and exits with its status, the command's own for ``gpuspan run``.

``gpuspan run train.py`` (a script, or ``-m module``) runs it with this interpreter, so that
``python -m gpuspan run train.py`` works from a pip install alone.
"""

import signal
import sys

_RUN_OPTIONS_WITH_VALUE = ("--protocol",)


def _with_interpreter(args):
    """``run``'s arguments, with this interpreter put before a bare script or ``-m``."""
    if not args or args[0] != "run":
        return args
    i = 1
    while i < len(args):
        arg = args[i]
        if arg == "--":
            i += 1
            break
        if arg in _RUN_OPTIONS_WITH_VALUE:
            i += 2
        elif arg.startswith("-") and arg != "-m":
            i += 1
        else:
            break
    rest = args[i:]
    if rest and (rest[0] == "-m" or rest[0].endswith(".py")):
        head = [a for a in args[:i] if a != "--"]
        return [*head, "--", sys.executable, *rest]
    return args


def main():
    from . import _native

    # As the native binary: Ctrl-C ends `gpuspan watch` at once.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    sys.stdout.flush()
    sys.exit(_native.cli_main(["gpuspan", *_with_interpreter(sys.argv[1:])]))

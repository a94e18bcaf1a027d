"""gpuspan's bootstrap for a Python command under ``gpuspan run``.

``gpuspan run`` puts this file's directory first on the command's ``PYTHONPATH``. It does
nothing at startup but watch for ``torch``, Lightning and the Transformers Trainer: once the program
imports one of them, it hands the module to the gpuspan package (``gpuspan._autorun``), which
opens the spans. It never changes what the program computes or how it exits: when the
package cannot be imported, it prints one warning line and the program runs on, with the
``run`` span only. A ``sitecustomize`` module that was already on the path still runs.
"""

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
# The Transformers Trainer's own module, not the package: most programs that import
# transformers never build a Trainer, and loading it costs seconds.
_WATCHED = ("torch", "lightning", "pytorch_lightning", "transformers.trainer")
_broken = False


def _arrived(name, module):
    """Called once ``name`` has been executed in full."""
    global _broken
    if _broken:
        return
    try:
        from gpuspan import _autorun
    except BaseException as error:  # noqa: BLE001 - the program must run on, whatever failed
        _broken = True
        print(
            f"gpuspan: warning: {name} was imported, but the gpuspan package cannot be "
            f"imported by {sys.executable} ({type(error).__name__}: {error}), so this run "
            f"records the run span only; install it in that environment: "
            f"{sys.executable} -m pip install gpuspan",
            file=sys.stderr,
        )
        return
    try:
        _autorun.arrived(name, module)
    except BaseException as error:  # noqa: BLE001
        _broken = True
        print(f"gpuspan: warning: instrumenting {name} failed ({error}); the program runs on "
              "without gpuspan's spans", file=sys.stderr)


class _Watcher:
    """A meta path finder that finds nothing itself: it lets the other finders find a
    watched module, and runs :func:`_arrived` after the module's code has run."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in _WATCHED:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is None:
                continue
            loader = spec.loader
            execute = getattr(loader, "exec_module", None)
            if execute is not None:

                def exec_module(module, _execute=execute, _name=fullname):
                    _execute(module)
                    _arrived(_name, module)

                try:
                    loader.exec_module = exec_module
                except (AttributeError, TypeError):
                    pass
            return spec
        return None


def _run_the_next_sitecustomize():
    """The ``sitecustomize`` this file hides (a distribution's, a virtualenv's)."""
    from importlib.machinery import PathFinder
    from importlib.util import module_from_spec

    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
    spec = PathFinder.find_spec("sitecustomize", rest)
    if spec is None or spec.loader is None:
        return
    module = module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as error:  # noqa: BLE001 - as site.py reports a failing sitecustomize
        print(f"Error in sitecustomize; set PYTHONVERBOSE for traceback:\n{type(error).__name__}: {error}",
              file=sys.stderr)


# ``gpuspan run`` puts this file on the path only when GPUSPAN_TORCH is on.
sys.meta_path.insert(0, _Watcher())
_run_the_next_sitecustomize()

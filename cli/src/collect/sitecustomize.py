"""gpuspan's bootstrap for a Python command under ``gpuspan run``.

``gpuspan run`` puts this file's directory first on the command's ``PYTHONPATH``. It does
nothing at startup but watch for ``torch``, Lightning and the Transformers Trainer: once the
program imports one of them, it calls each function registered in the entry point group
``gpuspan.autorun`` as ``function(name, module)``. The gpuspan package registers the one that
opens the spans; this file names no package. It never changes what the program computes or
how it exits: when nothing is registered for the interpreter, it prints one warning line and
the program runs on, with the ``run`` span only. A ``sitecustomize`` module that was already
on the path still runs.
"""

import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
# The Transformers Trainer's own module, not the package: most programs that import
# transformers never build a Trainer, and loading it costs seconds.
_WATCHED = ("torch", "lightning", "pytorch_lightning", "transformers.trainer")
# Where a package registers what it does with the watched modules.
_GROUP = "gpuspan.autorun"
# The registered functions, as (entry point, function): None until a watched module first
# arrives, as reading the installed packages' metadata costs milliseconds.
_hooks = None


def _registered():
    """The entry points of ``_GROUP`` that this interpreter's packages declare."""
    from importlib.metadata import entry_points

    if sys.version_info >= (3, 10):
        return entry_points(group=_GROUP)
    return entry_points().get(_GROUP, ())


def _warn(message):
    print(f"gpuspan: warning: {message}", file=sys.stderr)


def _load_hooks(name):
    """Loads the registered functions, or says in one line why there are none."""
    global _hooks
    # Set first: a watched module that loading a hook imports finds none, rather than
    # loading them again.
    _hooks = []
    try:
        found, unread = _registered(), ""
    except BaseException as error:  # noqa: BLE001 - the program must run on, whatever failed
        found, unread = (), f"; its packages' metadata cannot be read: {type(error).__name__}: {error}"
    for entry in found:
        try:
            function = entry.load()
        except BaseException as error:  # noqa: BLE001
            _warn(f"{name} was imported, but {entry.value} (registered in {_GROUP}) cannot be "
                  f"imported by {sys.executable} ({type(error).__name__}: {error}); the program "
                  "runs on without it")
            continue
        # The same package can be on the path twice: its function is called once.
        if all(function is not known for _, known in _hooks):
            _hooks.append((entry, function))
    if not found:
        _warn(f"{name} was imported, but the gpuspan package is not installed for "
              f"{sys.executable} (nothing is registered in the entry point group {_GROUP}"
              f"{unread}), so this run records the run span only; install it in that "
              f"environment: {sys.executable} -m pip install gpuspan")


def _arrived(name, module):
    """Called once ``name`` has been executed in full."""
    if _hooks is None:
        _load_hooks(name)
    for hook in list(_hooks):
        entry, function = hook
        try:
            function(name, module)
        except BaseException as error:  # noqa: BLE001
            _hooks.remove(hook)
            _warn(f"instrumenting {name} with {entry.value} failed ({type(error).__name__}: "
                  f"{error}); the program runs on without it")


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

from types import ModuleType

from lightning.pytorch import Callback

class GpuspanCallback(Callback):
    """gpuspan's ``epoch``, ``step``, ``validation``, ``sanity_check``, ``test`` and
    ``predict`` spans for a Lightning ``Trainer``."""

    def __init__(self) -> None: ...

def _auto_install(framework_module: ModuleType) -> None: ...

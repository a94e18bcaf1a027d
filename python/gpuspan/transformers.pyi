from types import ModuleType

from transformers import TrainerCallback

class GpuspanCallback(TrainerCallback):
    """gpuspan's ``epoch``, ``step`` and ``evaluation`` spans for a Transformers ``Trainer``."""

    def __init__(self) -> None: ...

def _auto_install(framework_module: ModuleType) -> None: ...

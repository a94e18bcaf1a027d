"""What the Lightning and Transformers tests share: the code their training scripts start
with (tiny data, and control of the fake NVML's memory from inside the script), and the
environment they run in."""

from conftest import clean_env, read_spans

# Prepended to a training script. `use(mib)` sets device 0's used memory and returns once
# the sampler has read it and handed the reading out (two reads later): a span open then
# has it in its peak, and one opening or closing after it starts or ends with it. Loaded
# from the same path, the library is the very copy gpuspan reads (one state per copy).
PRELUDE = """
import ctypes
import os
import time

import torch

MIB = 1024 * 1024
TOTAL = 143771 * MIB
_fake = ctypes.CDLL(os.environ["GPUSPAN_NVML_LIB"])
_fake.fake_nvml_call_count.argtypes = [ctypes.c_char_p]
_fake.fake_nvml_call_count.restype = ctypes.c_ulonglong
_fake.fake_nvml_set_memory.argtypes = [ctypes.c_uint, ctypes.c_ulonglong, ctypes.c_ulonglong]


def _reads():
    return _fake.fake_nvml_call_count(b"nvmlDeviceGetMemoryInfo_v2")


def use(mib, wait=True):
    _fake.fake_nvml_set_memory(0, mib * MIB, TOTAL)
    target, deadline = _reads() + 2, time.monotonic() + 30
    while wait and _reads() < target:
        if time.monotonic() > deadline:
            raise RuntimeError("gpuspan's sampler has not read the fake NVML for 30 s")
        time.sleep(0.0005)


def dataset(n, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.utils.data.TensorDataset(torch.randn(n, 4, generator=g), torch.randn(n, 1, generator=g))
"""


# A tiny LightningModule, for scripts that have imported Lightning as `pl`; a script that
# scripts memory or a failure subclasses it and overrides `training_step`.
LIGHTNING_MODEL = """

class Model(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.mse_loss(self.layer(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)
"""

# A script's start that fits with gpuspan's Lightning callback: the prelude, Lightning as
# `pl`, `GpuspanCallback` and `Model`.
LIGHTNING_FIT = (
    PRELUDE
    + """
import lightning.pytorch as pl

from gpuspan.lightning import GpuspanCallback
"""
    + LIGHTNING_MODEL
)

# Token ids and labels for the Transformers Trainer, and `tiny_bert()`, a randomly
# initialised BERT that classifies them.
TOKENS = """
from transformers import BertConfig, BertForSequenceClassification


class Tokens(torch.utils.data.Dataset):
    def __init__(self, n):
        g = torch.Generator().manual_seed(n)
        self.ids = torch.randint(0, 50, (n, 8), generator=g)
        self.labels = torch.randint(0, 2, (n,), generator=g)

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.labels[i]}


def tiny_bert():
    config = BertConfig(
        vocab_size=50, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
        intermediate_size=32, max_position_embeddings=16, num_labels=2,
    )
    return BertForSequenceClassification(config)
"""


def framework_env(fake_nvml, **extra):
    """A clean environment for a training script: the fake NVML, a fast sampler, run id
    ``r``, no network."""
    return clean_env(
        GPUSPAN_NVML_LIB=fake_nvml,
        GPUSPAN_SAMPLE_INTERVAL="1ms",
        GPUSPAN_RUN_ID="r",
        HF_HUB_OFFLINE=1,
        TRANSFORMERS_OFFLINE=1,
        HF_DATASETS_OFFLINE=1,
        TOKENIZERS_PARALLELISM="false",
        **extra,
    )


def by_start(spans, name):
    """The spans called ``name``, in the order they started."""
    return sorted(
        (s for s in spans if s["name"] == name), key=lambda s: int(s["startTimeUnixNano"])
    )


def parent(span):
    return span.get("parentSpanId") or None


def three_epochs(tmp_path, steps_of):
    """Run ``r``'s spans, and its epochs and steps in the order they started, once checked
    that it has epochs 0, 1 and 2, each the parent of the steps numbered ``steps_of(epoch)``."""
    spans = read_spans(tmp_path / "gpuspan-runs" / "r" / "traces.jsonl")
    epochs = by_start(spans, "epoch")
    assert [e["attributes"]["ml.epoch"] for e in epochs] == [0, 1, 2]
    steps = by_start(spans, "step")
    for e, epoch in enumerate(epochs):
        mine = [s for s in steps if parent(s) == epoch["spanId"]]
        assert [s["attributes"]["ml.step"] for s in mine] == steps_of(e)
    return spans, epochs, steps


def memory(span):
    """A span's ``gpu.memory`` (start, peak, end) in MiB."""
    a = span["attributes"]
    return tuple(a[f"gpu.memory.{edge}"] // (1024 * 1024) for edge in ("start", "peak", "end"))

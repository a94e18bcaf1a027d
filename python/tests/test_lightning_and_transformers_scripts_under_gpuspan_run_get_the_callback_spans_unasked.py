"""Unmodified Lightning and Transformers scripts (they never import gpuspan) under
`python -m gpuspan run`: the bootstrap adds the framework's callback, so the run has the
framework's epochs and steps, each step once (the optimizer hooks stand back while the
callback is in charge), all in the `run` span's trace, with the fake device's memory."""

import subprocess
import sys
import textwrap

from conftest import MIB, read_spans
from frameworks import LIGHTNING_MODEL, TOKENS, by_start, framework_env

LIGHTNING = (
    """
import torch
import lightning.pytorch as pl
"""
    + LIGHTNING_MODEL
    + """

g = torch.Generator().manual_seed(0)
data = torch.utils.data.TensorDataset(torch.randn(20, 4, generator=g), torch.randn(20, 1, generator=g))
trainer = pl.Trainer(
    max_epochs=2, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
    enable_progress_bar=False, enable_model_summary=False,
)
trainer.fit(Model(), torch.utils.data.DataLoader(data, batch_size=4))
print("callbacks:", sorted(type(c).__name__ for c in trainer.callbacks if "Gpuspan" in type(c).__name__))
"""
)

TRANSFORMERS = (
    """
import torch
from transformers import Trainer, TrainingArguments
"""
    + TOKENS
    + """

args = TrainingArguments(output_dir="out", num_train_epochs=2, per_device_train_batch_size=2,
                         save_strategy="no", logging_strategy="no", report_to=[], use_cpu=True,
                         disable_tqdm=True)
trainer = Trainer(model=tiny_bert(), args=args, train_dataset=Tokens(8))
trainer.train()
print("global steps:", trainer.state.global_step)
"""
)


def gpuspan_run(tmp_path, fake_nvml, script):
    (tmp_path / "train.py").write_text(textwrap.dedent(script))
    env = framework_env(fake_nvml, FAKE_NVML_USED_MIB=2500)
    proc = subprocess.run(
        [sys.executable, "-m", "gpuspan", "run", "train.py"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    assert "warning" not in proc.stderr, proc.stderr
    return proc, read_spans(tmp_path / "gpuspan-runs" / "r" / "traces.jsonl")


def check_trace(spans, epochs, steps):
    run = next(s for s in spans if s["name"] == "run")
    assert [s["attributes"]["ml.epoch"] for s in by_start(spans, "epoch")] == list(range(epochs))
    step_spans = by_start(spans, "step")
    assert len(step_spans) == steps
    epoch_ids = {s["spanId"] for s in by_start(spans, "epoch")}
    assert {s["parentSpanId"] for s in step_spans} <= epoch_ids
    assert {s["traceId"] for s in spans} == {run["traceId"]}
    assert {s["attributes"]["gpu.memory.peak"] for s in step_spans} == {2500 * MIB}
    return step_spans


def test_lightning_gets_its_callback_and_no_second_step_per_batch(tmp_path, fake_nvml):
    proc, spans = gpuspan_run(tmp_path, fake_nvml, LIGHTNING)
    assert "callbacks: ['GpuspanCallback']" in proc.stdout
    steps = check_trace(spans, epochs=2, steps=10)
    assert [s["attributes"]["ml.step"] for s in steps] == list(range(10))


def test_transformers_gets_its_callback_and_the_trainer_s_global_steps(tmp_path, fake_nvml):
    proc, spans = gpuspan_run(tmp_path, fake_nvml, TRANSFORMERS)
    assert "global steps: 8" in proc.stdout
    steps = check_trace(spans, epochs=2, steps=8)
    assert [s["attributes"]["ml.step"] for s in steps] == list(range(1, 9))

"""With ``memory_budget_stop`` (``GPUSPAN_MEMORY_BUDGET_STOP=true``), the first reading
over the memory budget stops a Lightning fit and a Transformers training at the end of the
optimizer step it happened in: that step is the last span, it carries the budget event,
stderr says why in one line, and a plain loop reads the same from ``stop_requested()``."""

from conftest import read_spans, run_python
from frameworks import LIGHTNING_FIT, PRELUDE, TOKENS, by_start, framework_env

REASON = (
    "gpuspan: gpu 0 reached 4.9 GiB, over the memory budget of 4.0 GiB "
    "(GPUSPAN_MEMORY_BUDGET_STOP)"
)

LIGHTNING = (
    LIGHTNING_FIT
    + """
import gpuspan


class Scripted(Model):
    def training_step(self, batch, batch_idx):
        if self.global_step == 3:
            use(5000)  # over the budget, freed before the step ends
            use(1000)
        return super().training_step(batch, batch_idx)


use(1000, wait=False)
trainer = pl.Trainer(
    max_epochs=3, accelerator="cpu", logger=False, enable_checkpointing=False,
    enable_progress_bar=False, enable_model_summary=False, callbacks=[GpuspanCallback()],
)
trainer.fit(Scripted(), torch.utils.data.DataLoader(dataset(20), batch_size=2))
print("global_step:", trainer.global_step)
print("stop_requested:", gpuspan._telemetry.stop_requested())
"""
)

TRANSFORMERS = (
    PRELUDE
    + """
from transformers import Trainer, TrainerCallback, TrainingArguments

from gpuspan.transformers import GpuspanCallback

"""
    + TOKENS
    + """


class Spike(TrainerCallback):
    def on_step_begin(self, args, state, control, **kwargs):
        if state.global_step == 3:  # the fourth optimizer step, ml.step 4
            use(5000)
            use(1000)


use(1000, wait=False)
args = TrainingArguments(
    output_dir="out", num_train_epochs=3, per_device_train_batch_size=2, save_strategy="no",
    logging_strategy="no", report_to=[], use_cpu=True, disable_tqdm=True,
)
trainer = Trainer(
    model=tiny_bert(), args=args, train_dataset=Tokens(10),
    callbacks=[GpuspanCallback(), Spike()],
)
trainer.train()
print("global_step:", trainer.state.global_step)
"""
)

PLAIN_LOOP = (
    PRELUDE
    + """
import gpuspan

telemetry = gpuspan.init()
use(1000)
steps = 0
for step in range(10):
    with gpuspan.step(step):
        steps += 1
        if step == 2:
            use(5000)
            use(1000)
    reason = telemetry.stop_requested()
    if reason:
        break
print("steps:", steps)
print("reason:", reason)
telemetry.shutdown()
"""
)


def budget_env(fake_nvml):
    return framework_env(
        fake_nvml, GPUSPAN_MEMORY_BUDGET="4GiB", GPUSPAN_MEMORY_BUDGET_STOP="true"
    )


def last_step_over_budget(tmp_path, count):
    steps = by_start(read_spans(tmp_path / "gpuspan-runs" / "r" / "traces.jsonl"), "step")
    assert len(steps) == count
    *under, over = steps
    assert over["attributes"]["gpu.memory.peak"] == 5000 * 1024 * 1024
    assert [e["name"] for e in over.get("events", [])] == ["gpu.memory.budget_exceeded"]
    assert all(not s.get("events") for s in under)
    return steps


def test_lightning_stops_after_the_step_that_went_over(tmp_path, fake_nvml):
    proc = run_python(LIGHTNING, tmp_path, budget_env(fake_nvml))
    # 10 batches an epoch for 3 epochs, stopped after the fourth optimizer step.
    assert "global_step: 4" in proc.stdout
    assert f"stop_requested: {REASON}" in proc.stdout
    steps = last_step_over_budget(tmp_path, 4)
    assert [s["attributes"]["ml.step"] for s in steps] == [0, 1, 2, 3]
    warnings = {line for line in proc.stderr.splitlines() if line.startswith("gpuspan: warning")}
    assert warnings == {
        f"gpuspan: warning: stopping training after step 3: {REASON}",
        "gpuspan: warning: step 3 peaked at 4.9 GiB on gpu 0, over the memory budget of 4.0 GiB",
    }


def test_transformers_stops_after_the_step_that_went_over(tmp_path, fake_nvml):
    proc = run_python(TRANSFORMERS, tmp_path, budget_env(fake_nvml))
    assert "global_step: 4" in proc.stdout
    steps = last_step_over_budget(tmp_path, 4)
    assert [s["attributes"]["ml.step"] for s in steps] == [1, 2, 3, 4]
    assert f"gpuspan: warning: stopping training after step 4: {REASON}" in proc.stderr


def test_a_plain_loop_reads_the_request_from_the_telemetry(tmp_path, fake_nvml):
    proc = run_python(PLAIN_LOOP, tmp_path, budget_env(fake_nvml))
    assert "steps: 3" in proc.stdout
    assert f"reason: {REASON}" in proc.stdout
    last_step_over_budget(tmp_path, 3)

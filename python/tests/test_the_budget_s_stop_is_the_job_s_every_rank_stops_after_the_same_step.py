"""With ``GPUSPAN_MEMORY_BUDGET_STOP`` in a job of two ranks (DDP on the CPU, gloo), only
rank 1's device goes over the budget, yet the job stops as one: every rank ends after the
same optimizer step (the one after the step that went over, the ranks having shared their
requests at its end), each says why in one line, and the job exits 0. A rank that stopped
alone would leave the other in its next all-reduce. Lightning's ``strategy="ddp"`` and the
Transformers ``Trainer`` under ``torchrun``, both under ``gpuspan run``, which adds the
callbacks unasked."""

import re
import subprocess
import sys
import textwrap

from conftest import spans_with_resources
from frameworks import LIGHTNING_MODEL, PRELUDE, TOKENS, framework_env

# `over_budget_on(device)`: the fake device of this rank reads 5000 MiB (over the 4 GiB
# budget) until gpuspan's sampler has read it, then 1000 MiB again. Each rank's process
# has its own copy of the fake library, so the other rank's device never moves.
SPIKE = """

def over_budget_on(device):
    for mib in (5000, 1000):
        _fake.fake_nvml_set_memory(device, mib * MIB, TOTAL)
        target, deadline = _reads() + 2, time.monotonic() + 30
        while _reads() < target:
            if time.monotonic() > deadline:
                raise RuntimeError("gpuspan's sampler has not read the fake NVML for 30 s")
            time.sleep(0.0005)
"""

LIGHTNING = PRELUDE + SPIKE + """
import lightning.pytorch as pl
""" + LIGHTNING_MODEL + """

class Scripted(Model):
    def training_step(self, batch, batch_idx):
        if self.global_rank == 1 and self.global_step == 1:
            over_budget_on(1)
        return super().training_step(batch, batch_idx)


trainer = pl.Trainer(
    max_epochs=3, accelerator="cpu", devices=2, strategy="ddp", logger=False,
    enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
)
trainer.fit(Scripted(), torch.utils.data.DataLoader(dataset(20), batch_size=2))
print(f"rank {trainer.global_rank} global_step: {trainer.global_step}", flush=True)
"""

TRANSFORMERS = PRELUDE + SPIKE + """
from transformers import Trainer, TrainerCallback, TrainingArguments
""" + TOKENS + """

class Spike(TrainerCallback):
    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        if args.process_index == 1 and state.global_step == 1:  # in ml.step 2, on rank 1
            over_budget_on(1)


args = TrainingArguments(
    output_dir="out", num_train_epochs=3, per_device_train_batch_size=2, save_strategy="no",
    logging_strategy="no", report_to=[], use_cpu=True, disable_tqdm=True, ddp_backend="gloo",
)
trainer = Trainer(
    model=tiny_bert(), args=args, train_dataset=Tokens(20),
    callbacks=[Spike()],
)
trainer.train()
print(f"rank {args.process_index} global_step: {trainer.state.global_step}", flush=True)
"""

OVER = "gpu 1 reached 4.9 GiB, over the memory budget of 4.0 GiB"


def run_job(tmp_path, fake_nvml, script, launcher):
    (tmp_path / "train.py").write_text(textwrap.dedent(script))
    env = framework_env(
        fake_nvml, FAKE_NVML_DEVICES=2, GPUSPAN_MEMORY_BUDGET="4GiB",
        GPUSPAN_MEMORY_BUDGET_STOP="true", OMP_NUM_THREADS=1,
    )
    return subprocess.run(
        [sys.executable, "-m", "gpuspan", "run", *launcher, "train.py"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600,
    )


def steps_by_rank(tmp_path):
    """{rank: [(ml.step, events on the span)]} from the job's run directory, in order. The
    job runs on one node: its ranks are its local ranks (Lightning's launcher sets no
    ``RANK``)."""
    out = {}
    for resource, span in spans_with_resources(tmp_path / "gpuspan-runs" / "r" / "traces.jsonl"):
        if span["name"] == "step":
            out.setdefault(int(resource["ml.local_rank"]), []).append((
                int(span["attributes"]["ml.step"]),
                [e["name"] for e in span.get("events", [])],
            ))
    return {rank: sorted(steps) for rank, steps in out.items()}


def assert_stopped_together(proc, tmp_path, steps, over, last):
    assert proc.returncode == 0, proc.stderr
    ranks = steps_by_rank(tmp_path)
    assert sorted(ranks) == [0, 1]
    # Both ranks ran the same steps and stopped after the same one.
    assert [s for s, _ in ranks[0]] == steps
    assert [s for s, _ in ranks[1]] == steps
    # Only rank 1's device went over, in step `over`.
    assert [(s, e) for s, e in ranks[1] if e] == [(over, ["gpu.memory.budget_exceeded"])]
    assert not any(e for _, e in ranks[0])
    # The ranks' lines may run together on the launcher's stdout and stderr.
    assert sorted(re.findall(r"rank (\d) global_step: (\d+)", proc.stdout)) == [
        ("0", str(len(steps))),
        ("1", str(len(steps))),
    ]
    stopping = re.findall(
        r"gpuspan: warning: stopping training after step (\d+): (.*?) \(GPUSPAN_MEMORY_BUDGET_STOP\)",
        proc.stderr,
    )
    assert sorted(stopping) == [
        (str(last), f"gpuspan: {OVER}"),
        (str(last), "rank 1 of the job went over its memory budget"),
    ], proc.stderr


def test_lightning_ddp_ranks_stop_after_the_same_step(tmp_path, fake_nvml):
    proc = run_job(tmp_path, fake_nvml, LIGHTNING, [])
    # Lightning's ml.step counts from 0: step 1 went over, every rank stops after step 2.
    assert_stopped_together(proc, tmp_path, [0, 1, 2], over=1, last=2)


def test_transformers_ranks_under_torchrun_stop_after_the_same_step(tmp_path, fake_nvml):
    torchrun = ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    proc = run_job(tmp_path, fake_nvml, TRANSFORMERS, torchrun)
    # The Trainer's ml.step counts from 1: step 2 went over, every rank stops after step 3.
    assert_stopped_together(proc, tmp_path, [1, 2, 3], over=2, last=3)

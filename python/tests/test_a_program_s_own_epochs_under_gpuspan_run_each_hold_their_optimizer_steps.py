"""A PyTorch script that opens its own `gpuspan.epoch(e)` and leaves the steps to `gpuspan
run`'s optimizer hooks: every epoch is exported, each with its own optimizer steps under it
(the step opened after an epoch's last `optimizer.step()` is not one of them), and each step
has the peak its own work reached. An error that ends an epoch ends the step inside it with
that error first. A forward pass with gradients outside the epochs opens no step that
holds an epoch."""

import subprocess
import sys
import textwrap

from conftest import DEVICE_USES, MIB, live_device_env, read_spans

TRAIN = DEVICE_USES + """
import os, time
import torch
import gpuspan

FAIL_AT = int(os.environ.get("FAIL_AT", "-1"))

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
step = 0
for epoch in range(3):
    with gpuspan.epoch(epoch):
        for _ in range(4):
            loss = model(torch.randn(8, 16)).pow(2).mean()
            loss.backward()
            device_uses(2000 + 100 * step)   # a spike inside the step
            time.sleep(0.06)
            device_uses(1000)
            time.sleep(0.06)   # read back down before the step (and the epoch) ends
            if step == FAIL_AT:
                raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
            optimizer.step()
            optimizer.zero_grad()
            step += 1
        with torch.no_grad():  # evaluation at the end of the epoch: in no step
            model(torch.randn(8, 16))
print("trained")
"""


def run(tmp_path, fake_nvml, **env):
    (tmp_path / "train.py").write_text(textwrap.dedent(TRAIN))
    env = live_device_env(tmp_path, fake_nvml, GPUSPAN_RUN_ID="job", **env)
    env.pop("PYTHONPATH", None)
    proc = subprocess.run(
        [sys.executable, "-m", "gpuspan", "run", "train.py"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )
    return proc, read_spans(tmp_path / "gpuspan-runs" / "job" / "traces.jsonl")


def test_three_epochs_of_four_optimizer_steps_give_three_epochs_and_twelve_steps(
    tmp_path, fake_nvml
):
    proc, spans = run(tmp_path, fake_nvml)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "trained\n"
    assert "warning" not in proc.stderr, proc.stderr
    epochs = {s["attributes"]["ml.epoch"]: s for s in spans if s["name"] == "epoch"}
    steps = sorted((s for s in spans if s["name"] == "step"), key=lambda s: s["attributes"]["ml.step"])
    assert sorted(epochs) == [0, 1, 2]
    assert [s["attributes"]["ml.step"] for s in steps] == list(range(12))
    for s in steps:
        epoch = epochs[s["attributes"]["ml.step"] // 4]
        assert s["parentSpanId"] == epoch["spanId"], (s["attributes"], epoch["attributes"])
        assert epoch["startTimeUnixNano"] <= s["startTimeUnixNano"]
        assert s["endTimeUnixNano"] <= epoch["endTimeUnixNano"]
    # Each step holds its own work: the spike of the step it counts, and no other.
    assert [s["attributes"]["gpu.memory.peak"] // MIB for s in steps] == [
        2000 + 100 * i for i in range(12)
    ]
    run_span = next(s for s in spans if s["name"] == "run")
    assert {e["parentSpanId"] for e in epochs.values()} == {run_span["spanId"]}


def test_an_oom_that_ends_an_epoch_ends_its_step_with_the_error_first(tmp_path, fake_nvml):
    proc, spans = run(tmp_path, fake_nvml, FAIL_AT=5)
    assert proc.returncode == 1, proc.stderr
    assert "torch.OutOfMemoryError: CUDA out of memory" in proc.stderr
    epochs = {s["attributes"]["ml.epoch"]: s for s in spans if s["name"] == "epoch"}
    steps = sorted((s for s in spans if s["name"] == "step"), key=lambda s: s["attributes"]["ml.step"])
    assert sorted(epochs) == [0, 1]
    assert [s["attributes"]["ml.step"] for s in steps] == list(range(6))
    failed = steps[5]
    assert failed["parentSpanId"] == epochs[1]["spanId"]
    # OTLP/JSON status codes: 0 unset, 2 error.
    assert failed["status"]["code"] == 2
    assert "OutOfMemoryError" in failed["status"]["message"]
    assert [e["name"] for e in failed.get("events", [])] == ["gpu.memory.oom"]
    assert epochs[1]["status"]["code"] == 2
    assert [s.get("status", {}).get("code", 0) for s in steps[:5]] == [0] * 5
    assert list((tmp_path / "gpuspan-runs" / "job").glob("near-oom-*.json"))


# Three epochs of two optimizer steps each, once `{setup}` has made the model and its
# optimizer, and a forward pass with gradients on, `{evaluation}`, inside or after each.
TWO_STEPS_AN_EPOCH = """
import torch
import gpuspan
{setup}
for epoch in range(3):
    with gpuspan.epoch(epoch):
        for _ in range(2):
            model(torch.randn(8, 16)).pow(2).mean().backward()
            optimizer.step()
            optimizer.zero_grad()
{evaluation}
print("trained")
"""

# A forward pass with gradients outside the epochs: a lazy module materialised before the
# loop, and an evaluation without torch.no_grad() after each epoch.
OUTSIDE = TWO_STEPS_AN_EPOCH.format(
    setup="""
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.LazyLinear(32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
model(torch.randn(8, 16))
optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)""",
    evaluation="    model(torch.randn(8, 16))",
)


def two_steps_an_epoch(tmp_path, fake_nvml, script):
    """Runs ``script`` (three epochs of two optimizer steps) under gpuspan run; returns its
    epochs by index and its steps in order, each checked to be a child of its own epoch."""
    (tmp_path / "train.py").write_text(textwrap.dedent(script))
    env = live_device_env(tmp_path, fake_nvml, GPUSPAN_RUN_ID="job")
    env.pop("PYTHONPATH", None)
    proc = subprocess.run(
        [sys.executable, "-m", "gpuspan", "run", "train.py"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    spans = read_spans(tmp_path / "gpuspan-runs" / "job" / "traces.jsonl")
    run_span = next(s for s in spans if s["name"] == "run")
    epochs = {s["attributes"]["ml.epoch"]: s for s in spans if s["name"] == "epoch"}
    steps = sorted((s for s in spans if s["name"] == "step"), key=lambda s: s["attributes"]["ml.step"])
    assert sorted(epochs) == [0, 1, 2]
    assert {e["parentSpanId"] for e in epochs.values()} == {run_span["spanId"]}
    assert [s["attributes"]["ml.step"] for s in steps] == list(range(6))
    for s in steps:
        epoch = epochs[s["attributes"]["ml.step"] // 2]
        assert s["parentSpanId"] == epoch["spanId"], (s["attributes"], epoch["attributes"])
    return spans, steps


def test_forward_passes_outside_the_epochs_open_no_step_that_holds_an_epoch(tmp_path, fake_nvml):
    two_steps_an_epoch(tmp_path, fake_nvml, OUTSIDE)


# The program's own phases (gpuspan.torch.phases), and an evaluation with gradients on at
# the end of each epoch: its backward phase is still open when the epoch ends.
OWN_PHASES = TWO_STEPS_AN_EPOCH.format(
    setup="""
import gpuspan.torch

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
gpuspan.torch.phases(model, optimizer)""",
    evaluation="        model(torch.randn(8, 16))",
)


def test_a_phase_left_open_in_the_step_an_epoch_drops_does_not_take_the_next_epochs_with_it(
    tmp_path, fake_nvml
):
    spans, steps = two_steps_an_epoch(tmp_path, fake_nvml, OWN_PHASES)
    for step in steps:
        phases = [s["name"] for s in spans if s.get("parentSpanId") == step["spanId"]]
        assert sorted(phases) == ["backward", "forward", "optimizer"], (step["attributes"], phases)

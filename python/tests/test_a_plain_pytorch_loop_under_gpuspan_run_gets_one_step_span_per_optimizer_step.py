"""A PyTorch training script that never imports gpuspan, run with `python -m gpuspan run`:
one `step` span per `optimizer.step()` (gradient accumulation included), each with the
exact peak the fake device reached during it, the tensors' sizes, the rank's job id, all
under the `run` span; the script's exit code comes back unchanged."""

import subprocess
import sys
import textwrap

from conftest import DEVICE_USES, MIB, live_device_env, read_spans

TRAIN = DEVICE_USES + """
import os, sys, time
import torch

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
for step in range(6):
    for micro in range(3):  # gradient accumulation: three batches per optimizer step
        loss = model(torch.randn(8, 16)).pow(2).mean()
        loss.backward()
    device_uses(1000 + 100 * step + 50)   # a spike inside the step
    time.sleep(0.08)
    device_uses(1000 + 100 * step)
    optimizer.step()
    optimizer.zero_grad()
with torch.no_grad():  # evaluation after the last step: no step of its own
    model(torch.randn(8, 16))
print("trained")
sys.exit(int(os.environ.get("EXIT_CODE", "0")))
"""


def run(tmp_path, fake_nvml, exit_code):
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent(TRAIN))
    env = live_device_env(tmp_path, fake_nvml, GPUSPAN_RUN_ID="job", EXIT_CODE=exit_code)
    env.pop("PYTHONPATH", None)
    proc = subprocess.run(
        [sys.executable, "-m", "gpuspan", "run", "train.py"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )
    return proc, read_spans(tmp_path / "gpuspan-runs" / "job" / "traces.jsonl")


def test_each_optimizer_step_is_one_step_span_with_its_exact_peak(tmp_path, fake_nvml):
    proc, spans = run(tmp_path, fake_nvml, 0)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "trained\n"
    assert "warning" not in proc.stderr, proc.stderr
    steps = sorted((s for s in spans if s["name"] == "step"), key=lambda s: s["startTimeUnixNano"])
    assert [s["attributes"]["ml.step"] for s in steps] == [0, 1, 2, 3, 4, 5]
    assert [s["attributes"]["gpu.memory.peak"] // MIB for s in steps] == [
        1050, 1150, 1250, 1350, 1450, 1550
    ]
    # Each step ends where the next begins: the data loading between them is in a step.
    for before, after in zip(steps, steps[1:]):
        assert int(after["startTimeUnixNano"]) - int(before["endTimeUnixNano"]) < 5_000_000
    # Exact sizes of the tensors: 16*32+32 + 32*4+4 floats of parameters, as many of
    # gradients, and Adam's two moments plus its step counter (a 4-byte tensor) for each of
    # the four parameter tensors.
    params = (16 * 32 + 32 + 32 * 4 + 4) * 4
    for s in steps:
        assert s["attributes"]["ml.params.bytes"] == params
        assert s["attributes"]["ml.grads.bytes"] == params
        assert s["attributes"]["ml.optimizer_state.bytes"] == 2 * params + 4 * 4
    run_span = next(s for s in spans if s["name"] == "run")
    assert {s["traceId"] for s in steps} == {run_span["traceId"]}
    assert {s["parentSpanId"] for s in steps} == {run_span["spanId"]}


def test_the_exit_code_comes_back_unchanged(tmp_path, fake_nvml):
    proc, spans = run(tmp_path, fake_nvml, 7)
    assert proc.returncode == 7, proc.stderr
    assert len([s for s in spans if s["name"] == "step"]) == 6

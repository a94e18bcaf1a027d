"""`GPUSPAN_TORCH_MEMORY_HISTORY=1` under `gpuspan run`: PyTorch's memory history is turned
on with a bounded ring and Python stacks, and a snapshot named by rank, step and trace id is
saved after the step in which the device crossed the near-OOM threshold and when an
out-of-memory error leaves the program (before it reaches Python's handler). CUDA is scripted
here (no GPU): `torch.cuda.memory`'s two calls are replaced by recorders that write what they
were asked; `tests/gpu/check_torch.py` runs the same on a real GPU."""

import json
import subprocess
import sys
import textwrap

from conftest import DEVICE_USES, live_device_env, read_spans

TRAIN = DEVICE_USES + """
import json, os, sys, time
import torch

calls = []
torch.cuda.is_available = lambda: True
torch.cuda.memory._record_memory_history = lambda **kw: calls.append(kw)
def dump(path):
    with open(path, "w") as f:
        json.dump({"history": calls}, f)
torch.cuda.memory._dump_snapshot = dump

model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(4):
    if step == 3:
        raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 8.00 GiB")
    model(torch.ones(2, 4)).sum().backward()
    if step == 1:
        device_uses(140000)  # 97 % of the fake's 143771 MiB
        time.sleep(0.1)
        device_uses(1000)
    optimizer.step()
"""


def test_snapshots_are_saved_at_the_near_oom_and_the_oom(tmp_path, fake_nvml):
    (tmp_path / "train.py").write_text(textwrap.dedent(TRAIN))
    env = live_device_env(tmp_path, fake_nvml, GPUSPAN_RUN_ID="r", GPUSPAN_TORCH_MEMORY_HISTORY=5000)
    proc = subprocess.run(
        [sys.executable, "-m", "gpuspan", "run", "train.py"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 1, proc.stderr
    assert "OutOfMemoryError: CUDA out of memory. Tried to allocate 8.00 GiB" in proc.stderr
    run = tmp_path / "gpuspan-runs" / "r"
    trace = next(s for s in read_spans(run / "traces.jsonl") if s["name"] == "run")["traceId"]
    snapshots = sorted(p.name for p in run.glob("memory-snapshot-*.pickle"))
    assert snapshots == [
        f"memory-snapshot-rank0-step1-{trace}-near-oom.pickle",
        f"memory-snapshot-rank0-step3-{trace}-oom.pickle",
    ], proc.stderr
    recorded = json.loads((run / snapshots[0]).read_text())["history"]
    assert recorded == [
        {"enabled": "all", "context": "all", "stacks": "python", "max_entries": 5000}
    ]

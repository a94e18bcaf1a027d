"""Phases: `GPUSPAN_TORCH_PHASES=1` under `gpuspan run` (every model, from global hooks) and
`gpuspan.torch.phases(model, optimizer)` (one model) put `forward`, `backward` and `optimizer`
child spans in each step, in the order the training thread passes them, each with the peak
the fake device reached while it was open. Evaluation under `torch.no_grad()` adds none."""

import subprocess
import sys
import textwrap

from conftest import MIB, clean_env, read_spans, run_python

LOOP = """
import ctypes, os, time
import torch

live = os.environ["FAKE_NVML_LIVE_FILE"]
# The very copy of the fake that gpuspan loads: its count of memory reads.
reads = ctypes.CDLL(os.environ["GPUSPAN_NVML_LIB"]).fake_nvml_call_count
reads.argtypes, reads.restype = [ctypes.c_char_p], ctypes.c_ulonglong

def device_uses(mib):
    with open(live + ".tmp", "w") as f:
        f.write(f"used 0 {mib * 1024 * 1024}\\n")
    os.replace(live + ".tmp", live)
    # Until the sampler has read it twice (once it runs): the next span starts from it.
    target, deadline = reads(b"nvmlDeviceGetMemoryInfo_v2") + 2, time.monotonic() + 0.5
    while reads(b"nvmlDeviceGetMemoryInfo_v2") < target and time.monotonic() < deadline:
        time.sleep(0.001)

def spike(mib):
    device_uses(mib)
    device_uses(1000)

class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))

    def forward(self, x):
        spike(2000)  # inside the forward pass
        return self.inner(x)

model = Model()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
PHASES

def train_step():
    for micro in range(2):
        model(torch.ones(2, 4)).sum().backward()
        spike(3000)  # after backward, before the next forward: the backward phase
    optimizer.step()
    optimizer.zero_grad()

for step in range(2):
    STEP
with torch.no_grad():
    model(torch.ones(2, 4))
"""


def phases_of(spans):
    """For each step in order: its children's (name, peak MiB) in the order they started."""
    steps = sorted((s for s in spans if s["name"] == "step"), key=lambda s: s["attributes"]["ml.step"])
    out = []
    for step in steps:
        children = sorted(
            (s for s in spans if s.get("parentSpanId") == step["spanId"]),
            key=lambda s: int(s["startTimeUnixNano"]),
        )
        out.append([(c["name"], c["attributes"]["gpu.memory.peak"] // MIB) for c in children])
    return out


EXPECTED = [
    [("forward", 2000), ("backward", 3000), ("forward", 2000), ("backward", 3000),
     ("optimizer", 1000)],
] * 2


def setup(tmp_path, fake_nvml):
    live = tmp_path / "gpu"
    live.write_text(f"used 0 {1000 * MIB}\n")
    return clean_env(
        GPUSPAN_NVML_LIB=fake_nvml, FAKE_NVML_LIVE_FILE=live, GPUSPAN_SAMPLE_INTERVAL="10ms",
        GPUSPAN_RUN_ID="r",
    )


def test_gpuspan_run_with_phases_on_splits_every_step(tmp_path, fake_nvml):
    script = LOOP.replace("PHASES", "").replace("STEP", "train_step()")
    (tmp_path / "train.py").write_text(textwrap.dedent(script))
    env = setup(tmp_path, fake_nvml)
    env["GPUSPAN_TORCH_PHASES"] = "1"
    proc = subprocess.run(
        [sys.executable, "-m", "gpuspan", "run", "train.py"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    spans = read_spans(tmp_path / "gpuspan-runs" / "r" / "traces.jsonl")
    assert phases_of(spans) == EXPECTED
    # The no_grad evaluation after the last step is no phase.
    assert len([s for s in spans if s["name"] == "forward"]) == 4


def test_phases_of_one_model_inside_the_program_s_own_steps(tmp_path, fake_nvml):
    script = (
        "import gpuspan, gpuspan.torch\ngpuspan.init(run_id='r')\n"
        + LOOP.replace("PHASES", "gpuspan.torch.phases(model, optimizer)").replace(
            "STEP", "with gpuspan.step(step):\n        train_step()")
    )
    run_python(script, tmp_path, setup(tmp_path, fake_nvml))
    spans = read_spans(tmp_path / "gpuspan-runs" / "r" / "traces.jsonl")
    assert phases_of(spans) == EXPECTED

"""A PyTorch script that never imports gpuspan runs out of memory in its third step under
`gpuspan run`: that step span ends with the error and a `gpu.memory.oom` event, the near-OOM
timeline file is written, the two steps before it are kept, and the error reaches the program's
top level unchanged, with the exit status Python gives it."""

import subprocess
import sys
import textwrap

from conftest import clean_env, read_spans

TRAIN = """
import torch

class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(4, 1)
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        if self.calls == 3:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return self.layer(x)

model = Model()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(5):
    model(torch.ones(2, 4)).sum().backward()
    optimizer.step()
"""


def test_the_oom_is_on_its_step_and_the_program_fails_as_it_would(tmp_path, fake_nvml):
    (tmp_path / "train.py").write_text(textwrap.dedent(TRAIN))
    env = clean_env(GPUSPAN_NVML_LIB=fake_nvml, FAKE_NVML_USED_MIB=3000, GPUSPAN_RUN_ID="r")
    proc = subprocess.run(
        [sys.executable, "-m", "gpuspan", "run", "train.py"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )
    alone = subprocess.run(
        [sys.executable, "train.py"], cwd=tmp_path, env=clean_env(), capture_output=True,
        text=True, timeout=300,
    )
    assert proc.returncode == alone.returncode == 1
    assert "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB" in proc.stderr
    run = tmp_path / "gpuspan-runs" / "r"
    steps = sorted(
        (s for s in read_spans(run / "traces.jsonl") if s["name"] == "step"),
        key=lambda s: s["attributes"]["ml.step"],
    )
    assert [s["attributes"]["ml.step"] for s in steps] == [0, 1, 2]
    # OTLP/JSON status codes: 0 unset, 2 error.
    assert [s.get("status", {}).get("code", 0) for s in steps[:2]] == [0, 0]
    failed = steps[2]
    assert failed["status"]["code"] == 2
    assert "OutOfMemoryError" in failed["status"]["message"]
    assert [e["name"] for e in failed.get("events", [])] == ["gpu.memory.oom"]
    assert list(run.glob("near-oom-*.json")), sorted(p.name for p in run.iterdir())

"""The PyTorch integration on a real NVIDIA GPU, for a machine that has one (CI has none).

    python tests/gpu/check_torch.py            # with the gpuspan wheel and torch (CUDA) installed

It runs a CUDA training script that never imports gpuspan under `python -m gpuspan run`, with
the memory history on, and checks what only a real driver and allocator can show:

- the step in which the script holds an extra 2 GiB tensor has a `gpu.memory.peak` at
  least 2 GiB above the step before, and an exact `gpu.allocator.allocated.peak` that is
  2 GiB above it to within the allocator's rounding (2 MiB);
- `gpu.process.memory.*` (the driver's per-process figure) is on every step;
- `ml.params.bytes`, `ml.grads.bytes` and `ml.optimizer_state.bytes` are the tensors' sizes;
- an allocation larger than the device raises `torch.cuda.OutOfMemoryError`: the step gets
  `gpu.memory.oom`, the exit status is Python's (1), and a memory snapshot that PyTorch can
  load is saved.

It prints a table of the figures and exits non-zero if a check fails.
"""

import glob
import json
import os
import pickle
import subprocess
import sys
import tempfile
import textwrap

GIB = 1 << 30
MIB = 1 << 20

TRAIN = """
import torch

device = torch.device("cuda")
model = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.ReLU(), torch.nn.Linear(4096, 1024)).to(device)
optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
for step in range(6):
    x = torch.randn(256, 1024, device=device)
    loss = model(x).pow(2).mean()
    loss.backward()
    if step == 3:
        extra = torch.empty(2 * (1 << 30), dtype=torch.uint8, device=device)
        extra.fill_(1)
        torch.cuda.synchronize()
        del extra
    optimizer.step()
    optimizer.zero_grad()
torch.cuda.synchronize()
free, total = torch.cuda.mem_get_info()
torch.empty(total * 2, dtype=torch.uint8, device=device)   # more than the device has
"""


def spans(path):
    out = []
    for line in open(path):
        for rs in json.loads(line)["resourceSpans"]:
            for ss in rs["scopeSpans"]:
                for span in ss["spans"]:
                    span["attributes"] = {
                        a["key"]: next(iter(a["value"].values())) for a in span.get("attributes", [])
                    }
                    out.append(span)
    return out


def main():
    failures = []

    def check(what, ok):
        print(f"{'ok  ' if ok else 'FAIL'} {what}")
        if not ok:
            failures.append(what)

    with tempfile.TemporaryDirectory() as work:
        with open(os.path.join(work, "train.py"), "w") as f:
            f.write(textwrap.dedent(TRAIN))
        env = dict(os.environ, GPUSPAN_RUN_ID="gpu-check", GPUSPAN_TORCH_MEMORY_HISTORY="1")
        proc = subprocess.run(
            [sys.executable, "-m", "gpuspan", "run", "train.py"],
            cwd=work, env=env, capture_output=True, text=True, timeout=600,
        )
        print(proc.stderr[-3000:])
        run = os.path.join(work, "gpuspan-runs", "gpu-check")
        steps = sorted(
            (s for s in spans(os.path.join(run, "traces.jsonl")) if s["name"] == "step"),
            key=lambda s: s["attributes"]["ml.step"],
        )
        print(f"{'step':>4} {'gpu peak MiB':>12} {'alloc peak MiB':>14} {'process peak MiB':>16}")
        for s in steps:
            a = s["attributes"]
            print(f"{a['ml.step']:>4} {a.get('gpu.memory.peak', 0) / MIB:>12.0f} "
                  f"{a.get('gpu.allocator.allocated.peak', 0) / MIB:>14.0f} "
                  f"{a.get('gpu.process.memory.peak', 0) / MIB:>16.0f}")
        check("exit status is Python's for an uncaught error (1)", proc.returncode == 1)
        check("7 step spans (6 optimizer steps and the one that ran out)", len(steps) == 7)
        if len(steps) >= 4:
            before, spike = steps[2]["attributes"], steps[3]["attributes"]
            check("NVML peak of step 3 is 2 GiB above step 2",
                  spike["gpu.memory.peak"] - before["gpu.memory.peak"] >= 2 * GIB - 2 * MIB)
            grow = spike.get("gpu.allocator.allocated.peak", 0) - before.get("gpu.allocator.allocated.peak", 0)
            check("allocator peak of step 3 is 2 GiB above step 2 (to 2 MiB)", abs(grow - 2 * GIB) <= 2 * MIB)
            params = (1024 * 4096 + 4096 + 4096 * 1024 + 1024) * 4
            check("ml.params.bytes is the parameters' size", spike.get("ml.params.bytes") == params)
            check("ml.optimizer_state.bytes holds Adam's two moments",
                  spike.get("ml.optimizer_state.bytes", 0) >= 2 * params)
        check("gpu.process.memory.peak on every step",
              all("gpu.process.memory.peak" in s["attributes"] for s in steps))
        if steps:
            last = steps[-1]
            check("the last step has gpu.memory.oom",
                  any(e["name"] == "gpu.memory.oom" for e in last.get("events", [])))
        shots = glob.glob(os.path.join(run, "memory-snapshot-*-oom.pickle"))
        check("a memory snapshot was saved at the OOM", len(shots) == 1)
        if shots:
            with open(shots[0], "rb") as f:
                snapshot = pickle.load(f)
            check("the snapshot has PyTorch's segments and traces",
                  "segments" in snapshot and "device_traces" in snapshot)
    print("all checks passed" if not failures else f"{len(failures)} check(s) failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

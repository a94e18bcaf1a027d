"""A small PyTorch MLP trained on the CPU (about 2 ms a step), the workload of
torch_cost.py. It never imports gpuspan; it prints its own per-step time as JSON: wall
time, and the training thread's CPU time (what the loop itself spent, whatever else the
machine runs; torch computes on this thread with one intra-op thread).

    python torch_mlp.py STEPS
"""

import json
import sys
import time

import torch


def model_and_step():
    """The model, its optimizer and one batch, seeded: a function that trains one step on it.
    torch_hooks.py trains the same model."""
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = torch.nn.Sequential(
        torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512), torch.nn.ReLU(),
        torch.nn.Linear(512, 10),
    )
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    x, y = torch.randn(64, 256), torch.randint(0, 10, (64,))

    def step():
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()

    return step


def main(steps):
    step = model_and_step()
    for _ in range(50):  # warm-up, outside the timed part
        step()
    start, cpu = time.perf_counter(), time.thread_time()
    for _ in range(steps):
        step()
    elapsed, cpu = time.perf_counter() - start, time.thread_time() - cpu
    print(json.dumps({"steps": steps, "seconds_per_step": elapsed / steps, "cpu_per_step": cpu / steps}))


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 2000)

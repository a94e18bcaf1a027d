"""What `gpuspan run`'s PyTorch auto-instrumentation costs a training loop, in one run.

1. End to end: torch_mlp.py (a small MLP, about 2 ms a step on one CPU thread) alone and
   under `python -m gpuspan run`, taking turns ROUNDS times; each reports its own per-step
   time over STEPS steps after a warm-up, so start-up is not in the figure. The result is
   the ratio of the medians.
2. The hooks alone, in this process: the two hooks PyTorch calls around each
   `optimizer.step()` (ending one step span and opening the next, spans going to a run
   directory), against two hooks that do nothing, taking turns; the difference of the
   medians of the training thread's CPU time is what the hooks cost called back to back,
   hot in the caches. Inside a real step, whose forward and backward passes evict the
   caches, they cost several times that: torch_hooks.py measures them there.

Wall time and the training thread's CPU time are both shown: on a busy machine the
export thread's work competes with the training thread for a core, which wall time shows
and thread CPU time leaves out.

    python torch_cost.py STEPS ROUNDS        # torch_run.sh sets up the venv and the fake NVML
"""

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def end_to_end(steps, rounds, work):
    script = os.path.join(HERE, "torch_mlp.py")
    cases = {
        "alone": [sys.executable, script, str(steps)],
        "gpuspan run": [sys.executable, "-m", "gpuspan", "run", script, str(steps)],
    }
    times = {(name, kind): [] for name in cases for kind in ("seconds_per_step", "cpu_per_step")}
    for _ in range(rounds):
        for name, command in cases.items():
            out = subprocess.run(command, cwd=work, capture_output=True, text=True, check=True)
            line = [text for text in out.stdout.splitlines() if text.startswith("{")][-1]
            figures = json.loads(line)
            for kind in ("seconds_per_step", "cpu_per_step"):
                times[(name, kind)].append(figures[kind])
    return {key: statistics.median(t) for key, t in times.items()}


def hooks_alone(steps, rounds, work):
    """The step hooks' own time per optimizer step on the training thread, against hooks
    that do nothing (the call PyTorch makes either way), taking turns."""
    import torch

    import gpuspan
    from gpuspan import _autorun

    gpuspan.init(run_dir=os.path.join(work, "runs"), summary=False)
    param = torch.nn.Parameter(torch.zeros(1))
    param.grad = torch.zeros(1)
    optimizer = torch.optim.SGD([param], lr=0.1)
    driver = _autorun._OptimizerSteps(torch)
    driver.off()  # called directly below, not from optimizer.step()
    driver._failed = False
    driver._before_optimizer(optimizer, (), {})  # the first step opens

    def nothing(optimizer, args, kwargs):
        return None

    def timed(before, after):
        start = time.thread_time()
        for _ in range(steps):
            before(optimizer, (), {})
            after(optimizer, (), {})
        return (time.thread_time() - start) / steps

    timed(driver._before_optimizer, driver._after_optimizer)  # warm-up
    empty, hooked = [], []
    for _ in range(rounds):
        empty.append(timed(nothing, nothing))
        hooked.append(timed(driver._before_optimizer, driver._after_optimizer))
        gpuspan._telemetry.flush()
    return statistics.median(empty), statistics.median(hooked)


def main(steps, rounds):
    with tempfile.TemporaryDirectory() as work:
        medians = end_to_end(steps, rounds, work)
        print(f"torch MLP, {steps} steps x {rounds} rounds (median per step):")
        for kind, label in (("seconds_per_step", "wall"), ("cpu_per_step", "training-thread CPU")):
            alone, run = medians[("alone", kind)], medians[("gpuspan run", kind)]
            print(f"  {label}: alone {alone * 1e3:.3f} ms, under gpuspan run {run * 1e3:.3f} ms, "
                  f"ratio {run / alone:.4f} ({(run - alone) * 1e6:+.1f} us/step)")
        empty, hooked = hooks_alone(steps * 10, rounds, work)
        print(f"the step hooks' own work, {steps * 10} steps x {rounds} rounds (training-thread CPU):")
        print(f"  hooks that do nothing  {empty * 1e6:8.2f} us")
        print(f"  gpuspan's step hooks   {hooked * 1e6:8.2f} us   added {(hooked - empty) * 1e6:.2f} us/step")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 2000, int(sys.argv[2]) if len(sys.argv) > 2 else 5)

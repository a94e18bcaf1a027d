"""What gpuspan's optimizer hooks add to a real training step, measured through the step.

torch_mlp.py's model (an MLP 256 -> 512 -> 512 -> 10, batch 64, Adam, on the CPU with one
intra-op thread) trains in blocks of BLOCK steps in one process. The blocks take turns
(with, without, without, with, ...): with gpuspan's step hooks registered on PyTorch's
optimizer, as `gpuspan run` registers them (one `step` span per `optimizer.step()`,
exported to a run directory), and with none. gpuspan is set up for the whole run, so its
sampler and export threads run in both kinds of block; what differs is the hooks and the
spans they open and end.

Each block gives its median step (the block's first step left out: turning the hooks on
opens a step span ahead of it): wall time, and the training thread's CPU time (what the
loop itself spent, which other programs' load inflates far less). The figure is the median
over pairs of neighbouring blocks of (with - without), next to the medians of each kind.
Short blocks and many pairs keep the two kinds close in time on a machine whose speed
drifts.

Then, apart from that comparison, as many steps again with the hooks wrapped in a timer:
the hooks' own training-thread CPU time inside a real step (ending one step span and
opening the next), which a loop that calls only the hooks, hot in the caches, understates.

    python torch_hooks.py BLOCK PAIRS      # torch_run.sh hooks sets up the venv and the fake NVML
"""

import os
import statistics
import sys
import tempfile
import time

import torch
from torch_mlp import model_and_step


class Hooks:
    """gpuspan's optimizer step hooks (the ones `gpuspan run` installs), on and off."""

    def __init__(self):
        from torch.optim import optimizer

        from gpuspan import _autorun

        self._optimizer = optimizer
        self.driver = _autorun._OptimizerSteps(torch)
        self.on = True

    def set(self, on, before=None, after=None):
        """Registers the hooks (`before` and `after` in their place, if given) or removes
        them."""
        if on == self.on:
            return
        driver = self.driver
        if on:
            driver._handles = [
                self._optimizer.register_optimizer_step_pre_hook(before or driver._before_optimizer),
                self._optimizer.register_optimizer_step_post_hook(after or driver._after_optimizer),
            ]
        else:
            for handle in driver._handles:
                handle.remove()
            driver._handles = []
            driver._abandon()  # no span stays open through a block without hooks
        self.on = on


def block(step, steps):
    """The median step of `steps` after the first: (wall seconds, training-thread CPU
    seconds)."""
    step()
    wall, cpu = [], []
    for _ in range(steps - 1):
        w, c = time.perf_counter(), time.thread_time()
        step()
        cpu.append(time.thread_time() - c)
        wall.append(time.perf_counter() - w)
    return statistics.median(wall), statistics.median(cpu)


def main(steps, pairs):
    import gpuspan

    with tempfile.TemporaryDirectory() as work:
        telemetry = gpuspan.init(run_dir=os.path.join(work, "runs"), summary=False)
        step = model_and_step()
        hooks = Hooks()
        for _ in range(100):  # warm-up, hooks on: the first step sets them up
            step()
        if hooks.driver._failed or hooks.driver._span is None:
            sys.exit("the step hooks did not open a step span")
        figures = {True: [], False: []}
        for pair in range(pairs):
            for on in ((True, False) if pair % 2 == 0 else (False, True)):
                hooks.set(on)
                figures[on].append(block(step, steps))
        hooks.set(False)
        own = hooks_own_time(hooks, step, steps * pairs)
        steps_recorded = hooks.driver._index
        telemetry.shutdown()

    print(f"torch MLP, blocks of {steps} steps, {pairs} pairs; {steps_recorded} step spans recorded")
    for index, label in ((0, "wall"), (1, "training-thread CPU")):
        with_hooks = [f[index] for f in figures[True]]
        without = [f[index] for f in figures[False]]
        added = [a - b for a, b in zip(with_hooks, without)]
        print(
            f"  {label}: without hooks {statistics.median(without) * 1e3:.4f} ms, "
            f"with hooks {statistics.median(with_hooks) * 1e3:.4f} ms; added per step "
            f"{statistics.median(added) * 1e6:+.2f} us (pairs {min(added) * 1e6:+.2f} to "
            f"{max(added) * 1e6:+.2f} us)"
        )
    print(f"  the hooks' own training-thread CPU inside the step, mean: {own * 1e6:.2f} us")


def hooks_own_time(hooks, step, steps):
    """The hooks' mean training-thread CPU time per step over `steps` real steps."""
    driver, spent = hooks.driver, [0.0]

    def timed(hook):
        def call(*args):
            start = time.thread_time()
            try:
                return hook(*args)
            finally:
                spent[0] += time.thread_time() - start

        return call

    hooks.set(True, timed(driver._before_optimizer), timed(driver._after_optimizer))
    step()  # opens the step span: not a steady step
    spent[0] = 0.0
    for _ in range(steps):
        step()
    hooks.set(False)
    return spent[0] / steps


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 20, int(sys.argv[2]) if len(sys.argv) > 2 else 200)

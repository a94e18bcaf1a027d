"""What deciding the budget's stop together costs a rank per optimizer step (gpuspan's
``JobStop.after_step``, see ``gpuspan/_job_stop.py``), against a blocking reduction at
every step end, in a DDP job of two ranks on the CPU (gloo).

    torchrun --standalone --nproc-per-node 2 python/benches/job_stop_cost.py

Each rank runs STEPS steps of a small DDP model (default 2000) three times: with a blocking
MAX all-reduce of one integer on a gloo group after each step (what a per-step
``reduce_boolean_decision`` does, without the device synchronisation NCCL adds), with
``JobStop.after_step()`` after each step, and with the one-process decision (``after_step``
where the job has one rank: a read of the telemetry). Only the call after the step is
timed. Prints, per rank and way, the median, the 99th percentile and the mean in
microseconds, and for ``JobStop`` how often the previous step's reduction was not finished
when read. Needs the gpuspan wheel installed; the fake NVML is not needed (no device).
"""

import os
import statistics
import time

import torch
import torch.distributed as dist

import gpuspan
from gpuspan._job_stop import JobStop

STEPS = int(os.environ.get("STEPS", "2000"))


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    gpuspan.init(
        memory_budget="4GiB", memory_budget_stop=True, traces_exporter="none",
        metrics_exporter="none", summary=False, nvml_lib="/nonexistent/libnvidia-ml.so.1",
    )
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(256, 256))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    batch = torch.randn(32, 256)

    def step():
        model(batch).sum().backward()
        optimizer.step()
        optimizer.zero_grad()

    group = dist.new_group(backend="gloo")

    def blocking():
        flag = torch.tensor([0], dtype=torch.int32)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=group)
        return int(flag.item())

    shared = JobStop()
    shared.begin()
    not_ready = 0

    def job_stop():
        nonlocal not_ready
        pending = shared._pending
        if pending is not None and not pending.is_completed():
            not_ready += 1
        return shared.after_step()

    alone = JobStop()  # a one-process decision: no group
    alone._group = None

    results = {}
    for name, call in (("blocking all-reduce", blocking), ("JobStop", job_stop),
                       ("one process", alone.after_step)):
        for _ in range(50):
            step()
            call()
        dist.barrier()
        times = []
        for _ in range(STEPS):
            step()
            started = time.perf_counter()
            call()
            times.append(time.perf_counter() - started)
        times.sort()
        results[name] = (
            statistics.median(times) * 1e6, times[int(len(times) * 0.99)] * 1e6,
            statistics.fmean(times) * 1e6,
        )
    shared.end()
    dist.barrier()
    for name, (median, p99, mean) in results.items():
        print(f"rank {rank}  {name:20s} median {median:7.1f} us  p99 {p99:8.1f} us  "
              f"mean {mean:7.1f} us", flush=True)
    print(f"rank {rank}  JobStop: previous reduction not finished when read at "
          f"{not_ready} of {STEPS} steps", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

"""`gpuspan run` around `torchrun --nproc-per-node 4` (gloo, on the CPU) with four fake
devices: every rank's resource says its rank, local rank, world size and the one job id
they share, and each rank's step spans carry the memory of its own device only (LOCAL_RANK),
not the sum over the node."""

import subprocess
import sys
import textwrap

from conftest import MIB, clean_env, spans_with_resources

TRAIN = """
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 2))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(3):
    model(torch.randn(4, 8)).sum().backward()
    optimizer.step()
    optimizer.zero_grad()
dist.destroy_process_group()
"""


def test_each_rank_has_its_position_the_job_id_and_its_own_device(tmp_path, fake_nvml):
    (tmp_path / "train.py").write_text(textwrap.dedent(TRAIN))
    live = tmp_path / "gpu"
    live.write_text("".join(f"used {i} {(i + 1) * 1000 * MIB}\n" for i in range(4)))
    env = clean_env(
        GPUSPAN_NVML_LIB=fake_nvml,
        FAKE_NVML_DEVICES=4,
        FAKE_NVML_LIVE_FILE=live,
        GPUSPAN_SAMPLE_INTERVAL="10ms",
        GPUSPAN_RUN_ID="job",
        OMP_NUM_THREADS=1,
    )
    proc = subprocess.run(
        [sys.executable, "-m", "gpuspan", "run", "-m", "torch.distributed.run", "--standalone",
         "--nproc-per-node", "4", "train.py"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    spans = spans_with_resources(tmp_path / "gpuspan-runs" / "job" / "traces.jsonl")
    steps = [(r, s) for r, s in spans if s["name"] == "step"]
    ranks = sorted({int(r["ml.rank"]) for r, _ in steps})
    assert ranks == [0, 1, 2, 3]
    assert len({r["ml.job.id"] for r, _ in steps}) == 1
    for rank in ranks:
        mine = [(r, s) for r, s in steps if int(r["ml.rank"]) == rank]
        assert len(mine) == 3
        for resource, span in mine:
            assert int(resource["ml.local_rank"]) == rank
            assert int(resource["ml.world_size"]) == 4
            assert int(span["attributes"]["gpu.memory.peak"]) == (rank + 1) * 1000 * MIB
            assert not any(k.startswith("gpu.1.") for k in span["attributes"])

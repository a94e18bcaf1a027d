"""Two Python ranks of one job on fake 16 GiB devices: rank 1's steps each peak 64 MiB
higher than the last, rank 0's stay flat. ``gpuspan.report()`` on the job gives, in
``job["first_forecast"]``, the same line as the ``gpuspan report`` table: rank 1 named
first forecast to run out of memory, with the step, the steps left, its device and the
growth a step; Jupyter's table shows it too."""

from conftest import MIB, run_ranks

import gpuspan

RANK = """
import os
import time

import gpuspan

rank = int(os.environ["RANK"])
live = os.environ["FAKE_NVML_LIVE_FILE"]


def device_uses(mib):
    with open(live + ".tmp", "w") as f:
        f.write(f"used {rank} {mib * 1024 * 1024}\\n")
    os.replace(live + ".tmp", live)


telemetry = gpuspan.init()
with gpuspan.epoch(0):
    for step in range(200):
        with gpuspan.step(step):
            device_uses(1000 + (64 * step if rank == 1 else 0))
            time.sleep(0.03)
telemetry.shutdown()
"""


def test_the_rank_whose_steps_ramp_is_named_first_forecast(tmp_path, fake_nvml):
    lives = [tmp_path / f"gpu-{rank}" for rank in range(2)]
    for rank, live in enumerate(lives):
        live.write_text(f"used {rank} {1000 * MIB}\n")
    env = {"FAKE_NVML_TOTAL_MIB": 16384, "GPUSPAN_SAMPLE_INTERVAL": "5ms"}
    job, _ = run_ranks(tmp_path, RANK, fake_nvml, lives, 180, **env)

    report = gpuspan.report(job)
    line = report.job["first_forecast"]
    assert line.startswith("first OOM forecast: rank 1 in step "), line
    assert ", out of memory in about " in line, line
    assert line.endswith(" steps on gpu 1 (+64.0 MiB a step); 1 of 2 ranks"), line
    assert line in report.job["table"]
    assert line in report._repr_html_()
    assert report.job["first_oom"] is None

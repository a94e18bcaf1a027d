"""Two jobs of two ranks each, started one after the other by the real torchrun with a
static rendezvous (``--nnodes 1 --master-addr ...``), where torchrun gives its ranks the
placeholder ``TORCHELASTIC_RUN_ID=none``: nothing is written to ``gpuspan-runs/none``, each
rank's directory holds its own spans and timeline only, and the first job's files are
whole after the second job ran. Each rank says in one line that its launcher named no job."""

import socket
import subprocess
import sys
import textwrap

from conftest import clean_env, read_spans

RANK = """
import os
import time

import gpuspan

assert os.environ["TORCHELASTIC_RUN_ID"] == "none", os.environ["TORCHELASTIC_RUN_ID"]
telemetry = gpuspan.init()
with gpuspan.epoch(0):
    for step in range(3):
        with gpuspan.step(step):
            time.sleep(0.05)
telemetry.shutdown()
"""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_job(tmp_path, fake_nvml):
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--nproc-per-node",
         "2", "--master-addr", "127.0.0.1", "--master-port", str(free_port()), "rank.py"],
        cwd=tmp_path,
        env=clean_env(
            GPUSPAN_NVML_LIB=fake_nvml, FAKE_NVML_DEVICES=2, GPUSPAN_SAMPLE_INTERVAL="10ms",
            OMP_NUM_THREADS=1,
        ),
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stderr


def rank_files(runs):
    """{rank directory: (traces.jsonl bytes, timeline.bin bytes)} under `runs`."""
    return {
        traces.parent: (traces.read_bytes(), (traces.parent / "timeline.bin").read_bytes())
        for traces in runs.rglob("traces.jsonl")
    }


def test_each_job_keeps_its_own_directories_and_leaves_the_other_s_whole(tmp_path, fake_nvml):
    (tmp_path / "rank.py").write_text(textwrap.dedent(RANK))
    runs = tmp_path / "gpuspan-runs"

    first_stderr = run_job(tmp_path, fake_nvml)
    first = rank_files(runs)
    assert len(first) == 2, sorted(first)
    second_stderr = run_job(tmp_path, fake_nvml)
    both = rank_files(runs)

    assert not (runs / "none").exists()
    assert len(both) == 4, sorted(both)
    for rank_dir, files in first.items():
        assert both[rank_dir] == files, f"{rank_dir} changed when the second job ran"
    for rank_dir, (_, timeline) in both.items():
        steps = [s for s in read_spans(rank_dir / "traces.jsonl") if s["name"] == "step"]
        assert len(steps) == 3, f"{rank_dir}: {len(steps)} steps, one job's"
        assert timeline, f"{rank_dir}: empty timeline"
    for stderr in (first_stderr, second_stderr):
        told = [line for line in stderr.splitlines() if "has no job id from its launcher" in line]
        assert len(told) == 2, stderr

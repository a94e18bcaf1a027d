"""Four Python ranks of one job (RANK / LOCAL_RANK / WORLD_SIZE, a fake device each).
Rank 3 catches an out-of-memory error at step 20 and hands it to ``gpuspan.record_oom``:
within a second the other ranks get ``gpu.memory.peer_oom`` on their open step, naming rank
3, its step, peak and limit, and one line on stderr. ``gpuspan.report()`` on the job then
gives the job's figures, the same as the ``gpuspan report`` command prints."""

import subprocess
import sys
from pathlib import Path

from conftest import MIB, clean_env, read_spans, run_ranks

import gpuspan

RANK = """
import os
import time

import gpuspan

rank = int(os.environ["RANK"])
telemetry = gpuspan.init()
with gpuspan.epoch(0):
    for step in range(60):
        with gpuspan.step(step):
            if rank == 3 and step == 20:
                gpuspan.record_oom("CUDA out of memory. Tried to allocate 2.00 GiB")
            time.sleep(0.05)
telemetry.shutdown()
"""


def events(run_dir, name):
    """(span, event) for every event called `name` in a rank's run directory."""
    return [
        (span, event)
        for span in read_spans(run_dir / "traces.jsonl")
        for event in span.get("events", [])
        if event["name"] == name
    ]


def event_attributes(event):
    out = {}
    for a in event.get("attributes", []):
        ((kind, value),) = a["value"].items()
        out[a["key"]] = int(value) if kind == "intValue" else value
    return out


def test_the_other_ranks_are_told_within_a_second_and_the_report_names_the_first(
    tmp_path, fake_nvml
):
    live = tmp_path / "gpu"
    live.write_text("".join(f"used {i} {(i + 1) * 1000 * MIB}\n" for i in range(4)))
    job, errs = run_ranks(tmp_path, RANK, fake_nvml, [live] * 4, 120, FAKE_NVML_TOTAL_MIB=81920)
    (oom_span, oom), = events(job / "rank-3", "gpu.memory.oom")
    assert oom_span["attributes"]["ml.step"] == 20
    for rank in range(3):
        (span, told), = events(job / f"rank-{rank}", "gpu.memory.peer_oom")
        assert span["name"] == "step"
        late = int(told["timeUnixNano"]) - int(oom["timeUnixNano"])
        assert 0 <= late < 1_000_000_000, f"rank {rank} told {late} ns after"
        attributes = event_attributes(told)
        assert attributes["ml.rank"] == 3
        assert attributes["ml.step"] == 20
        assert attributes["ml.epoch"] == 0
        assert attributes["gpu.index"] == 3
        assert attributes["gpu.memory.peak"] == 4000 * MIB
        assert attributes["gpu.memory.limit"] == 81920 * MIB
        assert attributes["gpu.memory.peer.finding"] == "gpu.memory.oom"
        err = errs[rank]
        lines = [line for line in err.splitlines() if "rank 3" in line]
        assert len(lines) == 1, err
        assert lines[0].startswith("gpuspan: warning: rank 3 (")
        assert lines[0].endswith(
            "ran out of device memory at step 20 of epoch 0 (gpu 3: 3.9 GiB peak of 80.0 GiB); "
            f"rank {rank} may now wait for it in a collective"
        ), lines[0]
    assert not events(job / "rank-3", "gpu.memory.peer_oom")

    report = gpuspan.report(job)
    figures = report.job
    assert figures["ranks"] == ["0", "1", "2", "3"]
    (epoch,) = figures["epochs"]
    assert epoch["epoch"] == 0
    assert (epoch["worst_rank"], epoch["worst_peak"]) == ("3", 4000 * MIB)
    assert epoch["lowest_peak"] == 1000 * MIB
    assert abs(epoch["skew"] - 3 / 4) < 1e-9
    assert figures["first_oom"].startswith("first out of memory: rank 3 in step 20 (")
    assert figures["first_oom"].endswith("UTC); 1 of 4 ranks")
    assert figures["steps"].startswith("steps: 60 on every rank;")

    command = subprocess.run(
        [str(Path(sys.executable).with_name("gpuspan")), "report", str(job)],
        capture_output=True, text=True, env=clean_env(), check=True,
    )
    assert command.stdout.endswith(figures["table"])
    assert repr(report).endswith(figures["table"])
    page = report._repr_html_()
    assert "<p>job of 4 ranks</p>" in page
    assert "<td>0</td><td>3</td><td>4000</td><td>1000</td><td>75.0 %</td>" in page

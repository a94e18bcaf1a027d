"""Ctrl-C raises KeyboardInterrupt in the program as usual, and SIGTERM raises SystemExit:
either way the open spans end (with the error) and every span reaches the run directory."""

import signal
import subprocess
import sys

import pytest
from conftest import clean_env, read_spans

SCRIPT = """
import sys, time
import gpuspan

telemetry = gpuspan.init(run_id="r", summary=False)
try:
    with gpuspan.epoch(0):
        for step in range(10_000):
            with gpuspan.step(step):
                if step == 3:
                    print("training", flush=True)
                time.sleep(0.02)  # the signal comes while a step is open
except KeyboardInterrupt:
    print("KeyboardInterrupt", flush=True)
"""


@pytest.mark.parametrize(
    "signum, returncode, said, status",
    [
        (signal.SIGINT, 0, "KeyboardInterrupt", "KeyboardInterrupt"),
        (signal.SIGTERM, 128 + signal.SIGTERM, "", "SystemExit: 143"),
    ],
)
def test_a_signal_ends_the_spans_and_keeps_them(tmp_path, fake_nvml, signum, returncode, said, status):
    proc = subprocess.Popen(
        [sys.executable, "-c", SCRIPT],
        cwd=tmp_path,
        env=clean_env(GPUSPAN_NVML_LIB=fake_nvml),
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout.readline() == "training\n"
    proc.send_signal(signum)
    rest, _ = proc.communicate(timeout=60)
    assert proc.returncode == returncode
    assert rest.strip() == said

    spans = read_spans(tmp_path / "gpuspan-runs" / "r" / "traces.jsonl")
    (epoch,) = [s for s in spans if s["name"] == "epoch"]
    steps = [s for s in spans if s["name"] == "step"]
    assert epoch["status"]["message"] == status
    assert len(steps) >= 4
    # The step open when the signal came ended with the error; the ones before it did not.
    assert [s["status"]["code"] for s in steps].count(2) == 1
    assert all(s["parentSpanId"] == epoch["spanId"] for s in steps)

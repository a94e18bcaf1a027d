"""Ctrl-C raises KeyboardInterrupt in the program as usual, and a SIGTERM handler of the
program's own (installed before ``gpuspan.init()`` or after it) decides what SIGTERM does:
either way the open spans end (with the error) and every span reaches the run directory.
(Without a handler, SIGTERM ends the program by the signal: see
test_sigterm_ends_a_python_program_by_the_signal_once_its_spans_are_flushed.py.)"""

import signal
import subprocess
import sys

import pytest
from conftest import clean_env, read_spans

SCRIPT = """
import signal, sys, time
import gpuspan

def on_sigterm(signum, frame):
    sys.exit(7)

if "{handler}" == "before":
    signal.signal(signal.SIGTERM, on_sigterm)
telemetry = gpuspan.init(run_id="r", summary=False)
if "{handler}" == "after":
    signal.signal(signal.SIGTERM, on_sigterm)
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


def _default_signals():
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, signal.SIG_DFL)


@pytest.mark.parametrize(
    "signum, handler, returncode, said, status",
    [
        (signal.SIGINT, "none", 0, "KeyboardInterrupt", "KeyboardInterrupt"),
        (signal.SIGTERM, "before", 7, "", "SystemExit: 7"),
        (signal.SIGTERM, "after", 7, "", "SystemExit: 7"),
    ],
)
def test_a_signal_ends_the_spans_and_keeps_them(
    tmp_path, fake_nvml, signum, handler, returncode, said, status
):
    proc = subprocess.Popen(
        [sys.executable, "-c", SCRIPT.format(handler=handler)],
        cwd=tmp_path,
        env=clean_env(GPUSPAN_NVML_LIB=fake_nvml),
        stdout=subprocess.PIPE,
        text=True,
        # As from a terminal: run in the background of a non-interactive shell, the tests
        # have SIGINT ignored, and Python keeps an ignored SIGINT ignored.
        preexec_fn=_default_signals,
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

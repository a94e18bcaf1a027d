"""SIGTERM does to a Python program under gpuspan what it does without: a program with no
SIGTERM handler of its own dies by the signal (status -15; 143 from a shell or from
``gpuspan run``), wherever it is (blocked in a C call that never returns on a signal, in a
read, inside a bare ``except BaseException``), once gpuspan has written the spans completed
so far. A second SIGTERM during that flush (a launcher and a ``kill`` of the process group
both send one) and a SIGTERM during the exit's own flush do not cut the flush short."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from conftest import attributes, clean_env, read_spans
from frameworks import LIGHTNING_MODEL

# Five completed steps inside an epoch that stays open, then `WAIT`.
STEPS_THEN = """
import os, sys, time
import gpuspan

telemetry = gpuspan.init(run_id="r", summary=False)
epoch = gpuspan.epoch(0)
epoch.__enter__()
for step in range(5):
    with gpuspan.step(step):
        time.sleep(0.01)
print("ready", flush=True)
{wait}
print("the program went on", flush=True)
"""

WAITS = {
    # A call into C that no signal interrupts, as a hung collective or a device
    # synchronisation: a default mutex locked twice by one thread never returns.
    "blocked in C": """
import ctypes
libc = ctypes.CDLL(None)
mutex = ctypes.create_string_buffer(64)  # all zeros: PTHREAD_MUTEX_INITIALIZER
libc.pthread_mutex_lock(mutex)
libc.pthread_mutex_lock(mutex)
""",
    "reading a pipe": """
r, w = os.pipe()
os.read(r, 1)
""",
    "swallowing every exception": """
while True:
    try:
        time.sleep(0.05)
    except BaseException:
        pass
""",
}


def start(tmp_path, script, **env):
    return popen([sys.executable, "-c", textwrap.dedent(script)], tmp_path, clean_env(**env))


def popen(args, cwd, env):
    """Starts `args` in a process group of its own, which `ended` kills if it must."""
    return subprocess.Popen(
        args, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,
    )


def ended(proc, timeout=60):
    """The process's exit status, once it has ended; a process still running after
    `timeout` is killed with its group and fails the test."""
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        pytest.fail(f"still running {timeout} s after SIGTERM: {proc.stderr.read()}")
    return proc.returncode


@pytest.mark.parametrize("wait", WAITS.keys())
def test_sigterm_ends_the_program_by_the_signal_with_its_completed_steps(
    tmp_path, fake_nvml, wait
):
    proc = start(tmp_path, STEPS_THEN.format(wait=WAITS[wait]), GPUSPAN_NVML_LIB=fake_nvml)
    assert proc.stdout.readline() == "ready\n"
    time.sleep(0.2)  # into the wait
    proc.send_signal(signal.SIGTERM)
    assert ended(proc) == -signal.SIGTERM, proc.stderr.read()
    assert proc.stdout.read() == ""

    spans = read_spans(tmp_path / "gpuspan-runs" / "r" / "traces.jsonl")
    assert sorted(s["attributes"]["ml.step"] for s in spans if s["name"] == "step") == [
        0, 1, 2, 3, 4,
    ]
    # The epoch never ended: it is not a span.
    assert [s for s in spans if s["name"] == "epoch"] == []


# Steps go out over OTLP/HTTP to a receiver that answers every span export after
# `receiver.stall` seconds, and keeps a request's spans only if the sender is still there
# to be answered: a process that died first delivered nothing.
OVER_OTLP = """
import os, sys, time
import gpuspan

telemetry = gpuspan.init(run_id="r", summary=False)
for step in range(5):
    with gpuspan.step(step):
        pass
print("ready", flush=True)
if os.environ.get("THEN") == "exit":
    sys.exit(0)
time.sleep(120)
"""


def otlp_env(fake_nvml, receiver, then):
    """Spans over OTLP; metrics to the run directory, where the shutdown's last act writes
    the sampler's record (sampler.json)."""
    return dict(
        GPUSPAN_NVML_LIB=fake_nvml,
        OTEL_EXPORTER_OTLP_ENDPOINT=receiver.endpoint,
        OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf",
        OTEL_METRICS_EXPORTER="run_dir",
        THEN=then,
    )


def test_a_second_sigterm_during_the_flush_waits_for_it(tmp_path, fake_nvml, receiver):
    receiver.stall = 2.0
    proc = start(tmp_path, OVER_OTLP, **otlp_env(fake_nvml, receiver, "wait"))
    assert proc.stdout.readline() == "ready\n"
    proc.send_signal(signal.SIGTERM)
    time.sleep(0.5)  # the flush now waits for the receiver's answer
    proc.send_signal(signal.SIGTERM)
    assert ended(proc) == -signal.SIGTERM, proc.stderr.read()
    assert sorted(attributes(s)["ml.step"] for s in receiver.named("step")) == [0, 1, 2, 3, 4]


def test_sigterm_during_the_exit_s_flush_ends_the_program_once_it_is_done(
    tmp_path, fake_nvml, receiver
):
    receiver.stall = 2.0
    proc = start(tmp_path, OVER_OTLP, **otlp_env(fake_nvml, receiver, "exit"))
    assert proc.stdout.readline() == "ready\n"
    time.sleep(0.5)  # exiting: the shutdown now waits for the receiver's answer
    proc.send_signal(signal.SIGTERM)
    assert ended(proc) == -signal.SIGTERM, proc.stderr.read()
    assert len(receiver.named("step")) == 5
    # The shutdown went through to its end before the signal ended the process.
    assert (tmp_path / "gpuspan-runs" / "r" / "sampler.json").exists()


# Lightning replaces SIGTERM's handler while it fits and puts back what Python saw there,
# the default, when the fit ends.
LIGHTNING_THEN_WAITING = """
import time
import torch
import lightning.pytorch as pl

from gpuspan.lightning import GpuspanCallback
""" + LIGHTNING_MODEL + """

data = torch.utils.data.TensorDataset(torch.randn(8, 4), torch.randn(8, 1))
trainer = pl.Trainer(
    max_epochs=1, accelerator="cpu", logger=False, enable_checkpointing=False,
    enable_progress_bar=False, enable_model_summary=False, callbacks=[GpuspanCallback()],
)
trainer.fit(Model(), torch.utils.data.DataLoader(data, batch_size=2))
print("ready", flush=True)
time.sleep(120)
"""


def test_after_a_lightning_fit_sigterm_still_flushes_first(tmp_path, fake_nvml, receiver):
    receiver.stall = 1.5  # the fit's last spans are still on their way when SIGTERM comes
    env = otlp_env(fake_nvml, receiver, "wait")
    proc = start(tmp_path, LIGHTNING_THEN_WAITING, **env)
    assert proc.stdout.readline() == "ready\n"
    proc.send_signal(signal.SIGTERM)
    assert ended(proc) == -signal.SIGTERM, proc.stderr.read()
    assert len(receiver.named("epoch")) == 1
    assert sorted(attributes(s)["ml.step"] for s in receiver.named("step")) == [0, 1, 2, 3]


TORCH_THEN_BLOCKED = """
import ctypes, time
import torch

model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(3):
    model(torch.ones(2, 4)).sum().backward()
    optimizer.step()
    optimizer.zero_grad()
print("ready", flush=True)
libc = ctypes.CDLL(None)
mutex = ctypes.create_string_buffer(64)
libc.pthread_mutex_lock(mutex)
libc.pthread_mutex_lock(mutex)  # never returns, as a hung collective
"""


def test_under_gpuspan_run_a_blocked_training_ends_on_sigterm(tmp_path, fake_nvml):
    (tmp_path / "train.py").write_text(textwrap.dedent(TORCH_THEN_BLOCKED))
    env = clean_env(GPUSPAN_NVML_LIB=fake_nvml, GPUSPAN_RUN_ID="job")
    proc = popen([sys.executable, "-m", "gpuspan", "run", "train.py"], tmp_path, env)
    assert proc.stdout.readline() == "ready\n"
    time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)  # gpuspan passes it on to the command
    assert ended(proc, timeout=90) == 128 + signal.SIGTERM, proc.stderr.read()

    spans = read_spans(tmp_path / "gpuspan-runs" / "job" / "traces.jsonl")
    steps = sorted(s["attributes"]["ml.step"] for s in spans if s["name"] == "step")
    assert steps == [0, 1, 2]
    (run,) = [s for s in spans if s["name"] == "run"]
    assert run["status"]["message"] == f"was ended by signal {int(signal.SIGTERM)}"


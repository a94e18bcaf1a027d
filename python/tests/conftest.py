"""Shared fixtures: the project's fake NVML built from C, a subprocess runner (gpuspan
installs once per process, as in a training script), and an in-process OTLP/HTTP receiver
that decodes what it gets with opentelemetry-proto."""

import json
import os
import shutil
import socket
import subprocess
import sys
import sysconfig
import textwrap
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FAKE_NVML_SOURCE = REPO / "tests" / "fake_nvml" / "fake_nvml.c"
MIB = 1024 * 1024


@pytest.fixture(scope="session")
def fake_nvml(tmp_path_factory):
    """Path of a fake libnvidia-ml.so.1 built from tests/fake_nvml/fake_nvml.c."""
    cc = shutil.which("cc")
    if cc is None:
        pytest.fail("the fake NVML is built with a C compiler: install gcc or clang")
    out = tmp_path_factory.mktemp("fake_nvml") / "libnvidia-ml.so.1"
    subprocess.run(
        [cc, "-shared", "-fPIC", "-O2", "-pthread", "-fvisibility=hidden",
         "-Wl,-soname,libnvidia-ml.so.1", "-o", str(out), str(FAKE_NVML_SOURCE)],
        check=True,
    )
    return out


def clean_env(**extra):
    """The test process's environment without any OTEL_*, GPUSPAN_*, fake-driver
    (FAKE_*) or CUDA_VISIBLE_DEVICES variable, plus `extra`."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("OTEL_", "GPUSPAN_", "FAKE_", "CUDA_VISIBLE"))
    }
    env.update({k: str(v) for k, v in extra.items()})
    return env


# For a script that moves the fake device's memory through FAKE_NVML_LIVE_FILE.
DEVICE_USES = """
import os

def device_uses(mib):
    live = os.environ["FAKE_NVML_LIVE_FILE"]
    with open(live + ".tmp", "w") as f:
        f.write(f"used 0 {mib * 1024 * 1024}\\n")
    os.replace(live + ".tmp", live)
"""


def live_device_env(tmp_path, fake_nvml, **extra):
    """A clean environment in which device 0 uses 1000 MiB until the script's
    ``device_uses(mib)`` (``DEVICE_USES``) says otherwise; the sampler reads every 10 ms."""
    live = tmp_path / "gpu"
    live.write_text(f"used 0 {1000 * MIB}\n")
    return clean_env(
        GPUSPAN_NVML_LIB=fake_nvml, FAKE_NVML_LIVE_FILE=live, GPUSPAN_SAMPLE_INTERVAL="10ms",
        **extra,
    )


def run_python(code, cwd, env, check=True, timeout=120):
    """Runs `code` in a fresh interpreter; returns the CompletedProcess."""
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if check and proc.returncode != 0:
        raise AssertionError(
            f"script exited with {proc.returncode}\n--- stdout\n{proc.stdout}\n--- stderr\n{proc.stderr}"
        )
    return proc


# A script of two epochs of three steps that never calls shutdown(), recorded as run `{run_id}`.
TWO_EPOCHS = """
import gpuspan

gpuspan.init(run_id="{run_id}")
for epoch in range(2):
    with gpuspan.epoch(epoch):
        for step in range(3):
            with gpuspan.step(step, batch_size=8):
                pass
print("trained")
"""


# A training that never imports gpuspan, exits with 5 and prints what it trained.
TORCH_ONLY = """
import sys
import torch
torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for _ in range(3):
    model(torch.ones(2, 4)).sum().backward()
    optimizer.step()
print("trained", round(float(model.weight.sum()), 4))
sys.exit(5)
"""


def run_ranks(tmp_path, script, fake_nvml, lives, timeout, **extra):
    """Runs ``script`` as ranks 0 to ``len(lives) - 1`` of job ``job`` at once, each with
    RANK, LOCAL_RANK and WORLD_SIZE and a fake device of its own, whose memory it reads
    from ``lives[rank]``. Returns the job's run directory and each rank's stderr, once
    every rank has exited 0."""
    (tmp_path / "rank.py").write_text(textwrap.dedent(script))
    procs = [
        subprocess.Popen(
            [sys.executable, "rank.py"],
            cwd=tmp_path,
            env=clean_env(
                GPUSPAN_NVML_LIB=fake_nvml,
                FAKE_NVML_DEVICES=len(lives),
                FAKE_NVML_LIVE_FILE=live,
                GPUSPAN_RUN_ID="job",
                RANK=rank,
                LOCAL_RANK=rank,
                WORLD_SIZE=len(lives),
                **extra,
            ),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for rank, live in enumerate(lives)
    ]
    errs = [p.communicate(timeout=timeout)[1] for p in procs]
    for rank, (p, err) in enumerate(zip(procs, errs)):
        assert p.returncode == 0, f"rank {rank}: {err}"
    return tmp_path / "gpuspan-runs" / "job", errs


def gpuspan_run(args, cwd, env):
    """Runs `args` under the installed package's `gpuspan run`; returns the CompletedProcess."""
    launcher = str(Path(sys.executable).with_name("gpuspan"))
    return subprocess.run(
        [launcher, "run", "--", *args], cwd=cwd, env=env, capture_output=True, text=True,
        timeout=300,
    )


def interpreter_without_gpuspan(tmp_path):
    """A fresh virtualenv that sees every package of this one except gpuspan."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    mirror = tmp_path / "packages"
    mirror.mkdir()
    site = Path(sysconfig.get_paths()["purelib"])
    for entry in site.iterdir():
        if not entry.name.lower().startswith("gpuspan"):
            (mirror / entry.name).symlink_to(entry)
    python = venv / "bin" / "python"
    target = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()
    Path(target, "mirror.pth").write_text(f"{mirror}\n")
    return python


def read_spans(traces_jsonl):
    """Every span of an OTLP/JSON lines file, as dicts with `attributes` flattened."""
    return [span for _, span in spans_with_resources(traces_jsonl)]


def spans_with_resources(traces_jsonl):
    """(resource attributes, span) for every span of an OTLP/JSON lines file, the span as
    a dict with `attributes` flattened."""
    out = []
    for line in Path(traces_jsonl).read_text().splitlines():
        if not line.strip():
            continue
        for rs in json.loads(line)["resourceSpans"]:
            resource = _flattened(rs.get("resource", {}).get("attributes", []))
            for ss in rs["scopeSpans"]:
                for span in ss["spans"]:
                    span["attributes"] = _flattened(span.get("attributes", []))
                    out.append((resource, span))
    return out


def _flattened(attributes):
    return {a["key"]: _json_value(a["value"]) for a in attributes}


def _json_value(value):
    (kind, v), = value.items()
    if kind == "intValue":
        return int(v)
    return v


class Receiver:
    """An OTLP/HTTP receiver on 127.0.0.1: keeps every span it is sent, decoded. With
    ``stall`` (seconds) it answers each span export that much later, and keeps its spans
    only if the sender is still there to be answered: a sender that died while waiting
    delivered nothing."""

    def __init__(self):
        from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

        self.spans = []
        self.resources = []
        self.stall = 0.0
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if self.path == "/v1/traces" and receiver.stall:
                    time.sleep(receiver.stall)
                    if _peer_closed(self.connection):
                        return
                if self.path == "/v1/traces":
                    request = trace_service_pb2.ExportTraceServiceRequest()
                    request.ParseFromString(body)
                    with receiver._lock:
                        for rs in request.resource_spans:
                            receiver.resources.append(rs.resource)
                            for ss in rs.scope_spans:
                                receiver.spans.extend(ss.spans)
                    reply = trace_service_pb2.ExportTraceServiceResponse().SerializeToString()
                else:
                    reply = b""  # metrics: accepted, not kept
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()

    def named(self, name):
        with self._lock:
            return [s for s in self.spans if s.name == name]


def _peer_closed(connection):
    """Whether the other end of a socket has closed it (or died)."""
    try:
        return connection.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


def attributes(span):
    """A protobuf span's attributes as a dict of Python values."""
    out = {}
    for kv in span.attributes:
        which = kv.value.WhichOneof("value")
        out[kv.key] = getattr(kv.value, which)
    return out


@pytest.fixture
def receiver():
    r = Receiver()
    yield r
    r.close()

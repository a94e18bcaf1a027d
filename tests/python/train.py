"""A training loop instrumented with the OpenTelemetry SDK alone, as many Python programs are.

It knows nothing of gpuspan: it exports its epoch and step spans over OTLP to wherever
OTEL_EXPORTER_OTLP_ENDPOINT points (gRPC or HTTP by OTEL_EXPORTER_OTLP_PROTOCOL), and
continues the trace named by TRACEPARENT.

Its "GPU" is the fake NVML library: it allocates by writing FAKE_NVML_LIVE_FILE, which the
fake reads at every query, so the device's memory follows what the program does, as on a
real GPU. Each step allocates 100 MiB more than the last; step 1 has a short spike. A
data-loader worker process holds memory too (it belongs to the process tree, not to this
process). Exits with TRAIN_EXIT_CODE.
"""

import os
import subprocess
import sys
import time

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

if os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc") == "grpc":
    from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
else:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

MIB = 1024 * 1024
LIVE = os.environ["FAKE_NVML_LIVE_FILE"]
HOLD = float(os.environ.get("TRAIN_HOLD_S", "0.12"))
SPIKE = float(os.environ.get("TRAIN_SPIKE_S", "0.06"))

worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])


def gpu(device_mib, mine_mib, hold):
    """What the driver shows once this program holds `mine_mib` (the device in all)."""
    tmp = LIVE + ".tmp"
    with open(tmp, "w") as f:
        f.write(f"used 0 {device_mib * MIB}\n")
        f.write(f"process {os.getpid()} 0 {mine_mib * MIB}\n")
        f.write(f"process {worker.pid} 0 {300 * MIB}\n")
    os.replace(tmp, LIVE)
    time.sleep(hold)


gpu(1000, 500, HOLD)
provider = TracerProvider(resource=Resource.create())
provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
tracer = provider.get_tracer("train")
parent = TraceContextTextMapPropagator().extract({"traceparent": os.environ.get("TRACEPARENT", "")})

with tracer.start_as_current_span("epoch", context=parent, attributes={"ml.epoch": 0}):
    for step in range(3):
        with tracer.start_as_current_span("step", attributes={"ml.step": step}):
            if step == 1:
                gpu(8000, 7000, SPIKE)
            gpu(2000 + 100 * step, 1000 + 100 * step, HOLD)

provider.shutdown()
worker.kill()
worker.wait()
sys.exit(int(os.environ.get("TRAIN_EXIT_CODE", "0")))

"""gpuspan spans nest under the program's current OpenTelemetry span, and spans the
program opens inside a gpuspan span are its children: one trace, end to end."""

import json

from conftest import clean_env, run_python

SCRIPT = """
import json
import gpuspan
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
tracer = provider.get_tracer("user")

telemetry = gpuspan.init()
with tracer.start_as_current_span("run"):
    with gpuspan.epoch(0):
        with gpuspan.step(0):
            with tracer.start_as_current_span("forward"):
                with gpuspan.span("kernel"):
                    pass
with gpuspan.epoch(1):
    pass
telemetry.shutdown()
print(json.dumps([
    {
        "name": s.name,
        "trace_id": s.context.trace_id,
        "span_id": s.context.span_id,
        "parent": s.parent.span_id if s.parent else None,
    }
    for s in exporter.get_finished_spans()
]))
"""


def test_one_trace_from_the_program_through_gpuspan_and_back(tmp_path, fake_nvml, receiver):
    env = clean_env(
        GPUSPAN_NVML_LIB=fake_nvml,
        OTEL_EXPORTER_OTLP_ENDPOINT=receiver.endpoint,
        OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf",
    )
    proc = run_python(SCRIPT, tmp_path, env)
    python_spans = {s["name"]: s for s in json.loads(proc.stdout.strip().splitlines()[-1])}
    run, forward = python_spans["run"], python_spans["forward"]

    def ids(span):
        return int.from_bytes(span.trace_id, "big"), int.from_bytes(span.span_id, "big")

    def parent(span):
        return int.from_bytes(span.parent_span_id, "big") if span.parent_span_id else None

    epochs = sorted(receiver.named("epoch"), key=lambda s: s.start_time_unix_nano)
    assert len(epochs) == 2
    epoch, later_epoch = epochs
    (step,) = receiver.named("step")
    (kernel,) = receiver.named("kernel")

    trace_id = run["trace_id"]
    for span in (epoch, step, kernel):
        assert ids(span)[0] == trace_id
    assert forward["trace_id"] == trace_id

    # program -> gpuspan: the epoch is a child of the program's current span.
    assert parent(epoch) == run["span_id"]
    assert parent(step) == ids(epoch)[1]
    # gpuspan -> program: the program's span opened inside the step is the step's child.
    assert forward["parent"] == ids(step)[1]
    # and back: a gpuspan span inside the program's span is its child.
    assert parent(kernel) == forward["span_id"]

    # With no current span, an epoch starts a trace of its own.
    assert parent(later_epoch) is None
    assert ids(later_epoch)[0] != trace_id

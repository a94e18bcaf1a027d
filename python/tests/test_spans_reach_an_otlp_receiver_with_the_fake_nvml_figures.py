"""A Python training loop's spans arrive at an OTLP/HTTP receiver with the exact figures
the fake NVML was scripted with, a spike between two readings included."""

from conftest import MIB, attributes, clean_env, run_python

BASE, SPIKE, AFTER = 3000 * MIB, 5000 * MIB, 3100 * MIB

SCRIPT = """
import time
import gpuspan

telemetry = gpuspan.init(service_name="py-train", sample_interval="2ms")
with gpuspan.epoch(0, lr=0.1):
    with gpuspan.step(0, batch_size=32) as step:
        time.sleep(1.2)  # the fake device spikes from 400 to 600 ms after init
        step.set_attribute("loss", 0.25)
    with gpuspan.span("eval", split="val"):
        pass
telemetry.shutdown()
"""


def test_spans_carry_the_scripted_memory(tmp_path, fake_nvml, receiver):
    timeline = tmp_path / "timeline.txt"
    timeline.write_text(f"0 0 {BASE}\n400 0 {SPIKE}\n600 0 {AFTER}\n")
    env = clean_env(
        GPUSPAN_NVML_LIB=fake_nvml,
        FAKE_NVML_TIMELINE=timeline,
        FAKE_NVML_PROCESS_MIB=512,
        OTEL_EXPORTER_OTLP_ENDPOINT=receiver.endpoint,
        OTEL_EXPORTER_OTLP_PROTOCOL="http/protobuf",
    )
    run_python(SCRIPT, tmp_path, env)

    (epoch,) = receiver.named("epoch")
    (step,) = receiver.named("step")
    (evaluation,) = receiver.named("eval")
    e, s, v = attributes(epoch), attributes(step), attributes(evaluation)

    assert e["ml.epoch"] == 0 and e["lr"] == 0.1
    assert s["ml.step"] == 0 and s["batch_size"] == 32 and s["loss"] == 0.25
    assert v["split"] == "val"

    assert (s["gpu.memory.start"], s["gpu.memory.peak"], s["gpu.memory.end"]) == (BASE, SPIKE, AFTER)
    assert s["gpu.memory.delta"] == AFTER - BASE
    assert (e["gpu.memory.start"], e["gpu.memory.peak"], e["gpu.memory.end"]) == (BASE, SPIKE, AFTER)
    assert (v["gpu.memory.start"], v["gpu.memory.peak"], v["gpu.memory.end"]) == (AFTER, AFTER, AFTER)
    assert s["gpu.process.memory.peak"] == 512 * MIB
    assert s["gpu.memory.source"] == "nvml"
    assert s["gpu.memory.samples"] > 100  # 1.2 s at 2 ms
    assert s["process.memory.peak"] > 0
    # No allocator in use (PyTorch is not imported): no allocator figures.
    assert not any(key.startswith("gpu.allocator.") for key in s)

    # One trace: the epoch is its root, the step and the eval span its children.
    assert step.trace_id == epoch.trace_id == evaluation.trace_id
    assert epoch.parent_span_id == b""
    assert step.parent_span_id == epoch.span_id
    assert evaluation.parent_span_id == epoch.span_id

    service = {
        kv.key: kv.value.string_value for r in receiver.resources for kv in r.attributes
    }["service.name"]
    assert service == "py-train"


def test_a_protocol_given_to_init_beats_the_environment(tmp_path, receiver):
    script = f"""
import gpuspan

telemetry = gpuspan.init(endpoint={receiver.endpoint!r}, protocol="http/protobuf")
with gpuspan.step(0):
    pass
telemetry.shutdown()
"""
    env = clean_env(
        GPUSPAN_NVML_LIB="/nonexistent/libnvidia-ml.so.1",
        OTEL_EXPORTER_OTLP_PROTOCOL="grpc",
        OTEL_EXPORTER_OTLP_TRACES_PROTOCOL="grpc",
        OTEL_EXPORTER_OTLP_METRICS_PROTOCOL="grpc",
    )
    run_python(script, tmp_path, env)
    (step,) = receiver.named("step")
    assert attributes(step)["ml.step"] == 0

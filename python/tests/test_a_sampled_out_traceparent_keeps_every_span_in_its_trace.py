"""A Python program started with a ``TRACEPARENT`` whose caller sampled the trace out (flag
00, as CI systems and launchers propagate) still gets every gpuspan span: the epoch and
its five steps reach the run directory in that trace, under the caller's span."""

import pytest
from conftest import clean_env, read_spans, run_python

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = "00f067aa0ba902b7"

SCRIPT = """
import gpuspan

telemetry = gpuspan.init(run_id="r", summary=False)
with gpuspan.epoch(0):
    for step in range(5):
        with gpuspan.step(step):
            pass
telemetry.shutdown()
"""


@pytest.mark.parametrize("flags", ["00", "01"])
def test_every_step_reaches_the_run_directory_in_the_callers_trace(tmp_path, fake_nvml, flags):
    env = clean_env(GPUSPAN_NVML_LIB=fake_nvml, TRACEPARENT=f"00-{TRACE}-{PARENT}-{flags}")
    run_python(SCRIPT, tmp_path, env)

    spans = read_spans(tmp_path / "gpuspan-runs" / "r" / "traces.jsonl")
    (epoch,) = [s for s in spans if s["name"] == "epoch"]
    steps = [s for s in spans if s["name"] == "step"]
    assert sorted(s["attributes"]["ml.step"] for s in steps) == [0, 1, 2, 3, 4]
    assert {s["traceId"] for s in spans} == {TRACE}
    assert epoch["parentSpanId"] == PARENT
    assert all(s["parentSpanId"] == epoch["spanId"] for s in steps)

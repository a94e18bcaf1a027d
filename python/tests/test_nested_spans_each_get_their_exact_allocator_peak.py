"""With an allocator's own peak counter (PyTorch's, or any object with read() and
reset_peak()), the peak stack gives every nested span its exact allocator peak, start
and end; `record_allocator` still feeds the peaks for other frameworks."""

from allocators import CACHING_COUNTERS, figures
from conftest import MIB, clean_env, read_spans, run_python

from gpuspan._allocator import PeakStack

SCRIPTED = CACHING_COUNTERS + """

class Scripted(CachingCounters):
    def read(self):
        return (self.allocated, self.reserved, self.peak_allocated, self.peak_reserved)

    def reset_peak(self):
        self.peak_allocated, self.peak_reserved = self.allocated, self.reserved
"""

SCRIPT = SCRIPTED + """
import gpuspan

MIB = 1024 * 1024
a = Scripted()
telemetry = gpuspan.init(run_id="r", allocator=a)
a.malloc(100 * MIB)  # the weights
with gpuspan.epoch(0):
    for step, activations in enumerate([300, 500, 200]):
        with gpuspan.step(step):
            a.malloc(activations * MIB)
            a.free(activations * MIB)
    with gpuspan.span("eval"):
        a.malloc(50 * MIB)
        a.free(50 * MIB)
    a.malloc(10 * MIB)  # kept past the epoch
with gpuspan.epoch(1):
    a.malloc(400 * MIB)  # the epoch's own peak, before its first step resets the counter
    a.free(400 * MIB)
    with gpuspan.step(0):
        # The higher peak first: the second span's reset must not lose it for the step.
        with gpuspan.span("forward"):
            a.malloc(200 * MIB)
            a.free(200 * MIB)
        with gpuspan.span("backward"):
            a.malloc(20 * MIB)
            a.free(20 * MIB)
telemetry.shutdown()
"""


def test_each_span_has_its_own_exact_peak(tmp_path, fake_nvml):
    run_python(SCRIPT, tmp_path, clean_env(GPUSPAN_NVML_LIB=fake_nvml))
    spans = read_spans(tmp_path / "gpuspan-runs" / "r" / "traces.jsonl")
    epochs = {s["attributes"]["ml.epoch"]: s for s in spans if s["name"] == "epoch"}
    steps = sorted(
        (s for s in spans if s["name"] == "step"), key=lambda s: int(s["startTimeUnixNano"])
    )
    (evaluation,) = [s for s in spans if s["name"] == "eval"]
    (forward,) = [s for s in spans if s["name"] == "forward"]
    (backward,) = [s for s in spans if s["name"] == "backward"]

    # (allocated start, peak, end, reserved start, peak, end) in MiB
    assert [figures(s) for s in steps] == [
        (100, 400, 100, 100, 400, 400),
        (100, 600, 100, 400, 600, 600),
        (100, 300, 100, 600, 600, 600),
        (110, 310, 110, 600, 600, 600),
    ]
    assert figures(evaluation) == (100, 150, 100, 600, 600, 600)
    assert figures(forward) == (110, 310, 110, 600, 600, 600)
    assert figures(backward) == (110, 130, 110, 600, 600, 600)
    assert figures(epochs[0]) == (100, 600, 110, 100, 600, 600)
    assert figures(epochs[1]) == (110, 510, 110, 600, 600, 600)


def test_record_allocator_feeds_the_peaks_of_open_spans(tmp_path, fake_nvml):
    script = """
import gpuspan
MIB = 1024 * 1024
telemetry = gpuspan.init(run_id="r", allocator=None)
with gpuspan.step(0):
    gpuspan.record_allocator(300 * MIB, 512 * MIB)
    gpuspan.record_allocator(200 * MIB, 512 * MIB)
telemetry.shutdown()
"""
    run_python(script, tmp_path, clean_env(GPUSPAN_NVML_LIB=fake_nvml))
    (step,) = read_spans(tmp_path / "gpuspan-runs" / "r" / "traces.jsonl")
    assert step["attributes"]["gpu.allocator.allocated.peak"] == 300 * MIB
    assert step["attributes"]["gpu.allocator.reserved.peak"] == 512 * MIB
    assert "gpu.allocator.allocated.start" not in step["attributes"]


def test_spans_closed_out_of_order_fold_into_the_enclosing_span():
    # Interleaved asyncio tasks can close an outer frame before an inner one.
    namespace = {}
    exec(SCRIPTED, namespace)
    a = namespace["Scripted"]()
    stack = PeakStack(a)
    outer = stack.open()
    first = stack.open()
    a.malloc(70)
    second = stack.open()
    a.free(70)
    assert stack.close(first) == (0, 0, 70, 0, 70, 70)
    a.malloc(30)
    assert stack.close(second) == (70, 30, 70, 70, 70, 70)
    assert stack.close(outer) == (0, 30, 70, 0, 70, 70)


def test_a_failing_allocator_raises_and_the_span_still_ends(tmp_path, fake_nvml):
    script = """
import gpuspan

class Broken:
    def read(self):
        raise OSError("device lost")

    def reset_peak(self):
        pass

telemetry = gpuspan.init(run_id="r", allocator=Broken())
try:
    with gpuspan.step(0):
        pass
except OSError as error:
    print("raised:", error)
telemetry.shutdown()
"""
    proc = run_python(script, tmp_path, clean_env(GPUSPAN_NVML_LIB=fake_nvml))
    assert proc.stdout.splitlines() == ["raised: device lost"]
    (step,) = read_spans(tmp_path / "gpuspan-runs" / "r" / "traces.jsonl")
    assert step["status"]["code"] == 2
    assert step["status"]["message"] == "allocator: OSError: device lost"

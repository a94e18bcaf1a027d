"""On Intel GPUs, PyTorch's XPU caching allocator gives every span its exact allocator
peak, start and end (``gpu.allocator.*``), as CUDA's does, with no setting.

The CPU build of torch the tests run has ``torch.xpu`` but no XPU device, so the scripts
stand in for the allocator's C counters only (``torch._C._xpu_memoryStats``,
``_xpu_resetPeakMemoryStats``, ``_xpu_getDevice``) and mark XPU initialised: everything
above them, ``torch.xpu.memory_allocated`` and the rest, is the real torch's."""

from allocators import CACHING_COUNTERS, figures
from conftest import clean_env, read_spans, run_python

FAKE_XPU = """
import torch
""" + CACHING_COUNTERS + """

class Counters(CachingCounters):
    # One device's counters, read and reset as the XPU caching allocator's C calls do.
    def stats(self, device):
        assert device == 1, device
        return {
            "allocated_bytes": {"all": {"current": self.allocated, "peak": self.peak_allocated}},
            "reserved_bytes": {"all": {"current": self.reserved, "peak": self.peak_reserved}},
        }

    def reset(self, device):
        assert device == 1, device
        self.peak_allocated, self.peak_reserved = self.allocated, self.reserved

xpu = Counters()
assert not torch.xpu.is_available(), "a real XPU: this stand-in is for the CPU build"
torch._C._xpu_memoryStats = xpu.stats
torch._C._xpu_resetPeakMemoryStats = xpu.reset
torch._C._xpu_getDevice = lambda: 1
torch.xpu._initialized = True
"""


def test_the_xpu_allocator_reads_what_torch_xpu_reports(tmp_path):
    script = FAKE_XPU + """
from gpuspan import TorchXpuAllocator

MIB = 1024 * 1024
allocator = TorchXpuAllocator(torch)
xpu.malloc(700 * MIB)
xpu.free(200 * MIB)
expected = (
    torch.xpu.memory_allocated(1),
    torch.xpu.memory_reserved(1),
    torch.xpu.max_memory_allocated(1),
    torch.xpu.max_memory_reserved(1),
)
assert allocator.read() == expected == (500 * MIB, 700 * MIB, 700 * MIB, 700 * MIB), (
    allocator.read(), expected)
allocator.reset_peak()
assert torch.xpu.max_memory_allocated(1) == 500 * MIB
print("ok")
"""
    out = run_python(script, tmp_path, clean_env())
    assert "ok" in out.stdout


def test_each_span_gets_the_xpu_allocator_s_exact_peak(tmp_path, fake_nvml):
    script = FAKE_XPU + """
import gpuspan

MIB = 1024 * 1024
telemetry = gpuspan.init(run_id="r")
xpu.malloc(100 * MIB)  # the weights
with gpuspan.epoch(0):
    for step, activations in enumerate([300, 500]):
        with gpuspan.step(step):
            xpu.malloc(activations * MIB)
            xpu.free(activations * MIB)
telemetry.shutdown()
"""
    run_python(script, tmp_path, clean_env(GPUSPAN_NVML_LIB=fake_nvml))
    spans = read_spans(tmp_path / "gpuspan-runs" / "r" / "traces.jsonl")
    steps = sorted(
        (s for s in spans if s["name"] == "step"), key=lambda s: int(s["startTimeUnixNano"])
    )
    (epoch,) = [s for s in spans if s["name"] == "epoch"]
    # (allocated start, peak, end, reserved start, peak, end) in MiB
    assert [figures(s) for s in steps] == [
        (100, 400, 100, 100, 400, 400),
        (100, 600, 100, 400, 600, 600),
    ]
    assert figures(epoch) == (100, 600, 100, 100, 600, 600)

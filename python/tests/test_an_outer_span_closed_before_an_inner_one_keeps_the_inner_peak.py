"""Spans of interleaved asyncio tasks can close out of order: an outer span may end while a
span opened after it is still open. The outer span's allocator peak must still include
everything that happened inside it, including the peaks its still-open inner spans hold."""

from conftest import MIB, clean_env, read_spans, run_python
from test_nested_spans_each_get_their_exact_allocator_peak import SCRIPTED

from gpuspan._allocator import PeakStack


def test_the_peak_stack_folds_every_frame_above_an_out_of_order_close():
    namespace = {}
    exec(SCRIPTED, namespace)
    a = namespace["Scripted"]()
    stack = PeakStack(a)
    a.malloc(10)
    outer = stack.open()
    middle = stack.open()
    a.malloc(90)  # the spike, while both are open
    a.free(90)
    inner = stack.open()
    a.malloc(5)
    a.free(5)
    # (allocated start, end, peak, reserved start, end, peak)
    assert stack.close(inner) == (10, 10, 15, 100, 100, 100)
    # The outer span ends first, while the middle one is still open.
    assert stack.close(outer) == (10, 10, 100, 10, 100, 100)
    assert stack.close(middle) == (10, 10, 100, 10, 100, 100)


SCRIPT = SCRIPTED + """
import asyncio

import gpuspan

MIB = 1024 * 1024
a = Scripted()
telemetry = gpuspan.init(run_id="r", allocator=a)
a.malloc(10 * MIB)


async def outer(opened, inner_closed, outer_closed):
    async with gpuspan.span("a"):
        opened.set()
        await inner_closed.wait()
    outer_closed.set()


async def inner(opened, inner_closed, outer_closed):
    await opened.wait()
    async with gpuspan.span("b"):
        a.malloc(90 * MIB)  # the spike
        a.free(90 * MIB)
        async with gpuspan.span("c"):
            a.malloc(5 * MIB)
            a.free(5 * MIB)
        inner_closed.set()
        # "a" ends while "b" is still open.
        await outer_closed.wait()


async def main():
    events = [asyncio.Event() for _ in range(3)]
    await asyncio.gather(outer(*events), inner(*events))


asyncio.run(main())
telemetry.shutdown()
"""


def test_interleaved_async_spans_each_keep_the_spike_they_saw(tmp_path, fake_nvml):
    run_python(SCRIPT, tmp_path, clean_env(GPUSPAN_NVML_LIB=fake_nvml))
    spans = {s["name"]: s for s in read_spans(tmp_path / "gpuspan-runs" / "r" / "traces.jsonl")}
    peak = {name: s["attributes"]["gpu.allocator.allocated.peak"] // MIB for name, s in spans.items()}
    # "a" was open during the spike (inside "b", before "c" opened): it must have it.
    assert peak == {"a": 100, "b": 100, "c": 15}

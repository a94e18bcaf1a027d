"""`gpuspan.span` as a decorator (sync and async), `async with` in interleaved asyncio
tasks, spans in threads, and a span ended on the wrong thread: a clear RuntimeError, no
crash, and the span still ends on its own thread."""

from collections import Counter

from conftest import clean_env, read_spans, run_python

SCRIPT = """
import asyncio
import threading
import gpuspan

telemetry = gpuspan.init(run_id="r")

@gpuspan.span("load", source="disk")
def load(n):
    return n * 2

assert load(1) == 2 and load(2) == 4 and load.__name__ == "load"

@gpuspan.span("fetch")
async def fetch(i):
    await asyncio.sleep(0.01)
    return i

async def worker(i):
    async with gpuspan.span(f"task-{i}"):
        await asyncio.sleep(0.02)  # the other task opens its spans meanwhile
        with gpuspan.span(f"inner-{i}"):
            assert await fetch(i) == i

async def main():
    await asyncio.gather(worker(0), worker(1))

asyncio.run(main())

def train(i):
    with gpuspan.step(i):
        pass

threads = [threading.Thread(target=train, args=(i,)) for i in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join()

# One Span object entered by two threads at once: the first in leaves first, and each
# thread ends its own span.
shared = gpuspan.span("shared")
first_in, second_in, first_out = threading.Event(), threading.Event(), threading.Event()

def enters_first():
    try:
        with shared:
            first_in.set()
            second_in.wait(10)
    finally:
        first_out.set()

def enters_second():
    first_in.wait(10)
    with shared:
        second_in.set()
        first_out.wait(10)

threads = [threading.Thread(target=f) for f in (enters_first, enters_second)]
for t in threads:
    t.start()
for t in threads:
    t.join()

crossing = gpuspan.span("crossing")
crossing.__enter__()
errors = []

def end_elsewhere():
    try:
        crossing.__exit__(None, None, None)
    except RuntimeError as error:
        errors.append(str(error))

t = threading.Thread(target=end_elsewhere)
t.start()
t.join()
print("ERROR:", errors[0])
crossing.__exit__(None, None, None)

try:
    with gpuspan.span("fails"):
        raise ValueError("bad batch")
except ValueError:
    pass

telemetry.shutdown()
"""


def test_spans_from_decorators_tasks_and_threads(tmp_path, fake_nvml):
    proc = run_python(SCRIPT, tmp_path, clean_env(GPUSPAN_NVML_LIB=fake_nvml))
    spans = read_spans(tmp_path / "gpuspan-runs" / "r" / "traces.jsonl")
    by_name = {}
    for span in spans:
        by_name.setdefault(span["name"], []).append(span)
    counts = Counter(s["name"] for s in spans)

    # Decorator: one span per call, keyword attributes on each.
    assert counts["load"] == 2
    assert all(s["attributes"]["source"] == "disk" for s in by_name["load"])

    # Interleaved asyncio tasks: each task's spans nest under its own span.
    for i in (0, 1):
        (task,) = by_name[f"task-{i}"]
        (inner,) = by_name[f"inner-{i}"]
        assert "parentSpanId" not in task or task["parentSpanId"] == ""
        assert inner["parentSpanId"] == task["spanId"]
        assert inner["traceId"] == task["traceId"]
    fetch_parents = sorted(s["parentSpanId"] for s in by_name["fetch"])
    assert fetch_parents == sorted(by_name[f"inner-{i}"][0]["spanId"] for i in (0, 1))

    # Threads: each thread's step is recorded with its index.
    assert sorted(s["attributes"]["ml.step"] for s in by_name["step"]) == [0, 1, 2, 3]
    assert all(s["attributes"]["gpu.memory.start"] == 1024 * 1024 * 1024 for s in by_name["step"])

    # Ending on another thread: a clear error, and the span ends once, on its thread.
    assert "ERROR: gpuspan span \"crossing\" was opened on thread" in proc.stdout
    assert "end a span on the thread that opened it" in proc.stdout
    assert counts["crossing"] == 1
    assert counts["shared"] == 2

    # An exception leaving the block marks the span as failed, with the exception.
    (fails,) = by_name["fails"]
    assert fails["status"]["code"] == 2
    assert fails["status"]["message"] == "ValueError: bad batch"

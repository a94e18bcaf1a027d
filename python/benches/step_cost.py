"""Per-step cost of `with gpuspan.step(i):` against the pynvml-plus-opentelemetry-sdk
pattern, in the same Python process, on the same fake NVML library.

The pattern is benches/compare/compare.py's: per step, an opentelemetry-sdk span
(BatchSpanProcessor, a no-op exporter) with ml.step and the start/end/peak/delta figures
from two pynvml reads. gpuspan exports its spans to a run directory (a real exporter, on
its own thread). Because the process has opentelemetry imported, every gpuspan span also
looks up the program's current OpenTelemetry span and makes itself current: the
interoperation is in the figure.

Both sides flush between chunks of 1024 steps, outside the timed part; cases take turns,
ROUNDS times; the result is the median per-step time minus the empty loop's.

    python step_cost.py STEPS ROUNDS      # run.sh sets up the library paths
"""

import json
import statistics
import sys
import tempfile
import time

CHUNK = 1024


def main(n, rounds):
    import pynvml
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    import gpuspan

    class NoopExporter(SpanExporter):
        def export(self, spans):
            return SpanExportResult.SUCCESS

        def shutdown(self):
            pass

    pynvml.nvmlInit()
    handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(NoopExporter()))
    trace.set_tracer_provider(provider)
    tracer = trace.get_tracer("train")

    run_dir = tempfile.mkdtemp(prefix="gpuspan-bench-")
    telemetry = gpuspan.init(run_dir=run_dir, summary=False)

    def pattern(first, count):
        for step in range(first, first + count):
            with tracer.start_as_current_span("step") as span:
                span.set_attribute("ml.step", step)
                start = [pynvml.nvmlDeviceGetMemoryInfo(h).used for h in handles]
                end = [pynvml.nvmlDeviceGetMemoryInfo(h).used for h in handles]
                span.set_attribute("gpu.memory.start", sum(start))
                span.set_attribute("gpu.memory.end", sum(end))
                span.set_attribute("gpu.memory.peak", max(sum(start), sum(end)))
                span.set_attribute("gpu.memory.delta", sum(end) - sum(start))

    def with_gpuspan(first, count):
        step = gpuspan.step
        for i in range(first, first + count):
            with step(i):
                pass

    def empty(first, count):
        for _step in range(first, first + count):
            pass

    def timed(body, flush):
        total = done = 0
        while done < n:
            k = min(CHUNK, n - done)
            t0 = time.perf_counter_ns()
            body(done, k)
            total += time.perf_counter_ns() - t0
            done += k
            if flush is not None:
                flush()
        return total / n

    cases = {
        "empty": (empty, None),
        "pattern": (pattern, provider.force_flush),
        "gpuspan": (with_gpuspan, telemetry.flush),
    }
    for body, flush in cases.values():  # warm up
        timed(body, flush)
    results = {name: [] for name in cases}
    for _ in range(rounds):
        for name, (body, flush) in cases.items():
            results[name].append(timed(body, flush))
    telemetry.shutdown()
    provider.shutdown()

    med = {name: statistics.median(v) for name, v in results.items()}
    pattern_over = med["pattern"] - med["empty"]
    gpuspan_over = med["gpuspan"] - med["empty"]
    print(json.dumps({
        "devices": len(handles),
        "steps": n,
        "rounds": rounds,
        "empty_ns": round(med["empty"], 1),
        "pattern_ns": round(med["pattern"]),
        "gpuspan_ns": round(med["gpuspan"]),
        "pattern_overhead_ns": round(pattern_over),
        "gpuspan_overhead_ns": round(gpuspan_over),
        "ratio": round(pattern_over / gpuspan_over, 1),
        "python": sys.version.split()[0],
    }))


if __name__ == "__main__":
    main(int(sys.argv[1]), int(sys.argv[2]))

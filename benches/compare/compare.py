"""The Python side of benches/compare/run.sh.

What Python training tutorials teach for GPU memory on traces: per step, read
nvmlDeviceGetMemoryInfo through pynvml (nvidia-ml-py) and put the readings on an
opentelemetry-sdk span, exported by a BatchSpanProcessor. Here the exporter is a no-op
(nothing leaves the process), which flatters Python: the gpuspan side exports OTLP/gRPC to
a real receiver.

The NVML library is whatever `libnvidia-ml.so.1` the loader finds: run.sh puts the fake
one's directory first on LD_LIBRARY_PATH, and pynvml's CDLL("libnvidia-ml.so.1") loads it.

Modes (JSON lines on standard output):
  steps N ROUNDS        per-step time of an empty loop and of the instrumented step
  timeline DIR SECONDS  writes DIR/timeline.txt (FAKE_NVML_TIMELINE) and DIR/spikes.json
  poll SECONDS P...     polls device 0 every P seconds (as nvitop, W&B, MLflow do)
  report STEPS SPIKES POLLS GPUSPAN   prints the tables
"""

import json
import os
import statistics
import sys
import threading
import time

CHUNK = 1024
GIB = 1024**3
BASE = 8 * GIB
# Spike durations in milliseconds: gpuspan's default interval is 5 ms, so 10 ms is two
# intervals, the shortest spike gpuspan promises to see.
DURATIONS_MS = [2, 5, 10, 20, 200]


def steps(n, rounds):
    import pynvml
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import (
        BatchSpanProcessor,
        SpanExporter,
        SpanExportResult,
    )

    class NoopExporter(SpanExporter):
        def export(self, spans):
            return SpanExportResult.SUCCESS

        def shutdown(self):
            pass

    pynvml.nvmlInit()
    handles = [
        pynvml.nvmlDeviceGetHandleByIndex(i)
        for i in range(pynvml.nvmlDeviceGetCount())
    ]
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(NoopExporter()))
    trace.set_tracer_provider(provider)
    tracer = trace.get_tracer("train")

    def instrumented(first, count):
        for step in range(first, first + count):
            with tracer.start_as_current_span("step") as span:
                span.set_attribute("ml.step", step)
                start = [pynvml.nvmlDeviceGetMemoryInfo(h).used for h in handles]
                # ... the training step itself (empty, as on the Rust side) ...
                end = [pynvml.nvmlDeviceGetMemoryInfo(h).used for h in handles]
                span.set_attribute("gpu.memory.start", sum(start))
                span.set_attribute("gpu.memory.end", sum(end))
                span.set_attribute("gpu.memory.peak", max(sum(start), sum(end)))
                span.set_attribute("gpu.memory.delta", sum(end) - sum(start))
                if len(handles) > 1:
                    for i, (s, e) in enumerate(zip(start, end)):
                        span.set_attribute(f"gpu.{i}.memory.start", s)
                        span.set_attribute(f"gpu.{i}.memory.end", e)
                        span.set_attribute(f"gpu.{i}.memory.peak", max(s, e))

    def empty(first, count):
        for step in range(first, first + count):
            pass

    def timed(body, flush):
        total = 0
        done = 0
        while done < n:
            k = min(CHUNK, n - done)
            t0 = time.perf_counter_ns()
            body(done, k)
            total += time.perf_counter_ns() - t0
            done += k
            if flush:
                provider.force_flush()
        return total / n

    timed(instrumented, True)
    e, s = [], []
    for _ in range(rounds):
        e.append(timed(empty, False))
        s.append(timed(instrumented, True))
    provider.shutdown()
    print(
        json.dumps(
            {
                "lang": "python",
                "devices": len(handles),
                "steps": n,
                "rounds": rounds,
                "empty_ns": statistics.median(e),
                "step_ns": statistics.median(s),
                "python": sys.version.split()[0],
            }
        )
    )


def timeline(directory, seconds):
    """Spikes of every duration in turn, 1.45 to 1.85 s apart at seeded random offsets;
    each spike has its own level, so an observer that reports a level saw that spike."""
    import random

    # Seeded, so runs are comparable; the offsets fall at every phase of the 5 ms, 1 s and
    # 10 s schedules rather than on a multiple of any of them.
    rng = random.Random(int(os.environ.get("SPIKE_SEED", "20241130")))
    spikes = []
    lines = ["# at_ms device used_bytes", f"0 0 {BASE}"]
    k = 0
    at = 1000 + rng.randrange(500)
    while at + 400 < seconds * 1000:
        duration = DURATIONS_MS[k % len(DURATIONS_MS)]
        level = 40 * GIB + k * GIB
        spikes.append({"at_ms": at, "duration_ms": duration, "level": level})
        lines.append(f"{at} 0 {level}")
        lines.append(f"{at + duration} 0 {BASE}")
        k += 1
        at += 1450 + rng.randrange(400)
    with open(os.path.join(directory, "timeline.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(os.path.join(directory, "spikes.json"), "w") as f:
        json.dump(spikes, f)


def poll(seconds, periods):
    import pynvml

    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    t0 = time.monotonic()
    seen = {}
    lock = threading.Lock()

    def poller(period):
        values = []
        # A poller started with the run: first reading one period in.
        k = 1
        while True:
            due = t0 + k * period
            if due - t0 > seconds:
                break
            time.sleep(max(0.0, due - time.monotonic()))
            with lock:
                values.append(pynvml.nvmlDeviceGetMemoryInfo(handle).used)
            k += 1
        seen[period] = values

    threads = [threading.Thread(target=poller, args=(p,)) for p in periods]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for p in periods:
        print(json.dumps({"observer": f"poll every {p:g} s", "period_s": p, "values": seen[p]}))


def report(steps_file, spikes_file, polls_file, gpuspan_file):
    rows = [json.loads(l) for l in open(steps_file) if l.strip()]
    print("per-step overhead (instrumented step minus empty loop), medians")
    print(
        f"{'devices':>7} {'gpuspan export':>15} {'python ns':>11} {'rust ns':>9} {'py empty':>9} "
        f"{'rs empty':>9} {'py overhead':>12} {'rs overhead':>12} {'python/rust':>12}"
    )
    for devices in sorted({r["devices"] for r in rows}):
        py = [r for r in rows if r["lang"] == "python" and r["devices"] == devices]
        if not py:
            continue
        py = py[-1]
        py_over = py["step_ns"] - py["empty_ns"]
        for export in ("none", "otlp-grpc"):
            rs = [
                r
                for r in rows
                if r["lang"] == "rust"
                and r["devices"] == devices
                and r.get("export", "otlp-grpc") == export
            ]
            if not rs:
                continue
            rs = rs[-1]
            rs_over = rs["step_ns"] - rs["empty_ns"]
            print(
                f"{devices:>7} {export:>15} {py['step_ns']:>11.0f} {rs['step_ns']:>9.0f} "
                f"{py['empty_ns']:>9.1f} {rs['empty_ns']:>9.1f} {py_over:>12.0f} "
                f"{rs_over:>12.0f} {py_over / rs_over:>11.1f}x"
            )
    print()
    spikes = json.load(open(spikes_file))
    observers = []
    g = [json.loads(l) for l in open(gpuspan_file) if l.strip()][-1]
    observers.append((f"gpuspan {g['interval_ms']:g} ms, step spans", set(g["span_peaks"])))
    observers.append((f"gpuspan {g['interval_ms']:g} ms, gpu.memory.peak", set(g["metric_peaks"])))
    for line in open(polls_file):
        if line.strip():
            p = json.loads(line)
            observers.append((p["observer"], set(p["values"])))
    print(
        f"spike capture: {len(spikes)} spikes on device 0 of the fake NVML; "
        f"gpuspan max gap between samples {g['max_gap_ms']:.1f} ms, {g['samples']} samples"
    )
    header = f"{'observer':<34}" + "".join(f"{str(d) + ' ms':>12}" for d in DURATIONS_MS)
    print(header)
    for name, values in observers:
        cells = []
        for d in DURATIONS_MS:
            mine = [s for s in spikes if s["duration_ms"] == d]
            hit = sum(1 for s in mine if s["level"] in values)
            cells.append(f"{hit}/{len(mine)} seen")
        print(f"{name:<34}" + "".join(f"{c:>12}" for c in cells))
    print()
    print("each spike (at ms from the observer's nvmlInit, duration, seen by):")
    for s in spikes:
        by = [name for name, values in observers if s["level"] in values]
        print(f"  {s['at_ms']:>6} ms  {s['duration_ms']:>4} ms  {', '.join(by) or 'nobody'}")


def main():
    mode, args = sys.argv[1], sys.argv[2:]
    if mode == "steps":
        steps(int(args[0]), int(args[1]))
    elif mode == "timeline":
        timeline(args[0], float(args[1]))
    elif mode == "poll":
        poll(float(args[0]), [float(p) for p in args[1:]])
    elif mode == "report":
        report(*args)
    else:
        sys.exit(f"unknown mode {mode}")


if __name__ == "__main__":
    main()

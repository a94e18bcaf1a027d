#!/usr/bin/env bash
# gpuspan against the Python pattern, on the same fake NVML library.
#
#   benches/compare/run.sh            # about 2 minutes once the venv and the bench exist
#
# 1. Per-step overhead: N steps of gpuspan's step_span! (benches/compare_steps.rs) and N
#    steps of the Python tutorial pattern (pynvml reads + an opentelemetry-sdk span with
#    memory attributes, BatchSpanProcessor, no-op exporter; compare.py), with 1 and 8 fake
#    devices; overhead = instrumented step - empty loop, in the same process; ratio. gpuspan
#    runs with its spans sent nowhere (as Python's no-op exporter) and over OTLP/gRPC.
# 2. Spike capture: a fake NVML timeline with spikes of 2, 5, 10, 20 and 200 ms spread over
#    SPIKE_SECONDS (default 42, so a 10 s poller reads 4 times), observed by gpuspan at its
#    default 5 ms interval (step spans and the gpu.memory.peak gauge) and by pollers reading
#    the same library every 1 s and every 10 s (nvitop, W&B, MLflow), all at once.
#
# Environment: STEPS (default 20000), ROUNDS (default 5), SPIKE_SECONDS (default 42),
# PYTHON (default python3). The venv lives in target/compare-venv.
set -euo pipefail
cd "$(dirname "$0")/../.."

STEPS=${STEPS:-20000}
ROUNDS=${ROUNDS:-5}
SPIKE_SECONDS=${SPIKE_SECONDS:-42}
PYTHON=${PYTHON:-python3}
VENV=target/compare-venv
OUT=target/compare
mkdir -p "$OUT/fake"

if [ ! -x "$VENV/bin/python" ]; then
    "$PYTHON" -m venv "$VENV"
fi
if ! "$VENV/bin/python" -c 'import pynvml, opentelemetry.sdk' 2>/dev/null; then
    "$VENV/bin/pip" install --quiet --disable-pip-version-check nvidia-ml-py opentelemetry-sdk
fi
PY="$VENV/bin/python"

# The same fake library for both sides, built as tests/support/fake_nvml.rs builds it.
cc -shared -fPIC -O2 -pthread -fvisibility=hidden -Wall -Wextra \
    -Wl,-soname,libnvidia-ml.so.1 -o "$OUT/fake/libnvidia-ml.so.1" tests/fake_nvml/fake_nvml.c
FAKE="$PWD/$OUT/fake/libnvidia-ml.so.1"

BENCH=$(cargo bench --bench compare_steps --no-run --message-format=json 2>/dev/null \
    | "$PY" -c 'import json,sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "compare_steps" and m.get("executable"):
        print(m["executable"])')
[ -x "$BENCH" ] || { echo "could not build benches/compare_steps.rs" >&2; exit 1; }

# Nothing of the caller's OTel, gpuspan or fake settings leaks in.
clean_env() {
    env | cut -d= -f1 | { grep -E '^(OTEL_|GPUSPAN_|FAKE_NVML_|CUDA_VISIBLE_DEVICES$|RUST_LOG$)' || true; } \
        | sed 's/^/-u /' | tr '\n' ' '
}
ENV_CLEAN=$(clean_env)

echo "machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "python: $("$PY" --version 2>&1), $("$PY" -c 'import importlib.metadata as m; print("nvidia-ml-py", m.version("nvidia-ml-py"), "opentelemetry-sdk", m.version("opentelemetry-sdk"))')"
echo

: > "$OUT/steps.jsonl"
for devices in 1 8; do
    # gpuspan twice: spans sent nowhere (still through its export thread and taps), as the
    # Python side's no-op exporter does, and over OTLP/gRPC to an in-process receiver.
    for export in none otlp; do
        # shellcheck disable=SC2086
        env $ENV_CLEAN GPUSPAN_NVML_LIB="$FAKE" FAKE_NVML_DEVICES=$devices GPUSPAN_BENCH_EXPORT=$export \
            "$BENCH" steps "$STEPS" "$ROUNDS" >> "$OUT/steps.jsonl"
    done
    # shellcheck disable=SC2086
    env $ENV_CLEAN LD_LIBRARY_PATH="$OUT/fake${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" FAKE_NVML_DEVICES=$devices \
        "$PY" benches/compare/compare.py steps "$STEPS" "$ROUNDS" >> "$OUT/steps.jsonl"
done

"$PY" benches/compare/compare.py timeline "$OUT" "$SPIKE_SECONDS"
echo "spike capture: observing a ${SPIKE_SECONDS} s timeline ($OUT/timeline.txt) ..."
# shellcheck disable=SC2086
env $ENV_CLEAN GPUSPAN_NVML_LIB="$FAKE" FAKE_NVML_TIMELINE="$PWD/$OUT/timeline.txt" \
    "$BENCH" spikes "$SPIKE_SECONDS" > "$OUT/gpuspan-spikes.jsonl" &
rust_pid=$!
# shellcheck disable=SC2086
env $ENV_CLEAN LD_LIBRARY_PATH="$OUT/fake${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" FAKE_NVML_TIMELINE="$PWD/$OUT/timeline.txt" \
    "$PY" benches/compare/compare.py poll "$SPIKE_SECONDS" 1 10 > "$OUT/polls.jsonl"
wait "$rust_pid"
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
echo

"$PY" benches/compare/compare.py report "$OUT/steps.jsonl" "$OUT/spikes.json" \
    "$OUT/polls.jsonl" "$OUT/gpuspan-spikes.jsonl"

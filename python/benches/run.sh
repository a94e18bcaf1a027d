#!/usr/bin/env bash
# `with gpuspan.step(i):` against pynvml reads around an opentelemetry-sdk span, in one
# Python process, with 1 and 8 fake devices (step_cost.py says how it measures).
#
#   python/benches/run.sh        # about 4 minutes the first time (release wheel), then 1
#
# Environment: STEPS (default 20000), ROUNDS (default 5), PYTHON (default python3). The
# venv lives in target/python-bench.
set -euo pipefail
cd "$(dirname "$0")/../.."

STEPS=${STEPS:-20000}
ROUNDS=${ROUNDS:-5}
PYTHON=${PYTHON:-python3}
DIR=target/python-bench
mkdir -p "$DIR/fake"

if [ ! -x "$DIR/venv/bin/python" ]; then
    "$PYTHON" -m venv "$DIR/venv"
    "$DIR/venv/bin/pip" install --quiet --disable-pip-version-check \
        maturin==1.16.0 nvidia-ml-py==13.615.71 opentelemetry-sdk==1.45.2
fi
PY="$DIR/venv/bin/python"
(cd python && "../$DIR/venv/bin/maturin" build --release --quiet --out "../$DIR/wheels")
"$DIR/venv/bin/pip" install --quiet --disable-pip-version-check --force-reinstall --no-deps \
    "$(ls -t "$DIR"/wheels/gpuspan-*.whl | head -1)"

# The same fake library for both sides; pynvml finds it on LD_LIBRARY_PATH, gpuspan
# through GPUSPAN_NVML_LIB.
cc -shared -fPIC -O2 -pthread -fvisibility=hidden -Wl,-soname,libnvidia-ml.so.1 \
    -o "$DIR/fake/libnvidia-ml.so.1" tests/fake_nvml/fake_nvml.c
FAKE="$PWD/$DIR/fake/libnvidia-ml.so.1"

for devices in 1 8; do
    (cd "$DIR" && LD_LIBRARY_PATH="$(dirname "$FAKE")" GPUSPAN_NVML_LIB="$FAKE" \
        FAKE_NVML_DEVICES=$devices "../../$PY" ../../python/benches/step_cost.py "$STEPS" "$ROUNDS")
done

#!/usr/bin/env bash
# What `gpuspan run`'s PyTorch auto-instrumentation costs (torch_cost.py says how it measures),
# with a release wheel, real torch on the CPU and the fake NVML.
#
#   python/benches/torch_run.sh     # about 5 minutes the first time (release wheel, torch), then 3
#   python/benches/torch_run.sh hooks   # the hooks through a real step instead (torch_hooks.py)
#
# Environment: STEPS (default 2000; with hooks, the steps of a block, default 20), ROUNDS
# (default 5; with hooks, the pairs of blocks, default 200), PYTHON (default python3). The
# venv lives in target/python-bench-torch.
set -euo pipefail
cd "$(dirname "$0")/../.."

WHAT=${1:-cost}
if [ "$WHAT" = hooks ]; then
    STEPS=${STEPS:-20}
    ROUNDS=${ROUNDS:-200}
else
    STEPS=${STEPS:-2000}
    ROUNDS=${ROUNDS:-5}
fi
PYTHON=${PYTHON:-python3}
DIR=target/python-bench-torch
mkdir -p "$DIR/fake"

if [ ! -x "$DIR/venv/bin/python" ]; then
    "$PYTHON" -m venv "$DIR/venv"
    "$DIR/venv/bin/pip" install --quiet --disable-pip-version-check uv
    "$DIR/venv/bin/python" -m uv pip install --quiet --compile-bytecode \
        --python "$DIR/venv/bin/python" maturin==1.16.0 torch==2.15.0 numpy
fi
(cd python && "../$DIR/venv/bin/maturin" build --release --quiet --out "../$DIR/wheels")
"$DIR/venv/bin/python" -m uv pip install --quiet --python "$DIR/venv/bin/python" --reinstall \
    --no-deps "$(ls -t "$DIR"/wheels/gpuspan-*.whl | head -1)"

cc -shared -fPIC -O2 -pthread -fvisibility=hidden -Wl,-soname,libnvidia-ml.so.1 \
    -o "$DIR/fake/libnvidia-ml.so.1" tests/fake_nvml/fake_nvml.c
SCRIPT=python/benches/torch_cost.py
if [ "$WHAT" = hooks ]; then
    SCRIPT=python/benches/torch_hooks.py
fi
GPUSPAN_NVML_LIB="$PWD/$DIR/fake/libnvidia-ml.so.1" "$DIR/venv/bin/python" \
    "$SCRIPT" "$STEPS" "$ROUNDS"

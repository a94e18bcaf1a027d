#!/usr/bin/env bash
# Installs the OpenTelemetry Python SDK and its OTLP exporters (gRPC and HTTP) from PyPI into
# a venv at target/python-otel/venv, for the tests that run a Python training program under
# `gpuspan run`.
#
# Idempotent and quick once installed (a stamp file records what the venv holds), and safe to
# run from several test processes at once (flock).
#
# Time on a 2-core machine: about 40 s on a cold package cache (uv), 0.1 s when in place.
#
# Environment: PYTHON_OTEL_DIR (default <repo>/target/python-otel), PYTHON (default
# python3; 3.9 or newer).
set -euo pipefail

OTEL_VERSION=1.45.2

. "$(dirname "${BASH_SOURCE[0]}")/../install_dir.sh"
install_dir PYTHON_OTEL_DIR python-otel
stamp="$venv/.gpuspan-installed"
packages=(
    "opentelemetry-sdk==$OTEL_VERSION"
    "opentelemetry-exporter-otlp-proto-grpc==$OTEL_VERSION"
    "opentelemetry-exporter-otlp-proto-http==$OTEL_VERSION"
)
want="${packages[*]}"

if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
    exit 0
fi
started=$(date +%s)
python="${PYTHON:-python3}"
"$python" -c 'import sys; sys.exit(sys.version_info < (3, 9))' || {
    echo "install.sh: $python is $("$python" --version 2>&1); the OpenTelemetry SDK needs 3.9 or newer" >&2
    exit 1
}
echo "install.sh: creating $venv with $want" >&2
rm -rf "$venv"
"$python" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check uv
"$venv/bin/python" -m uv pip install --quiet --python "$venv/bin/python" "${packages[@]}"
echo "$want" >"$stamp"
echo "install.sh: done in $(( $(date +%s) - started ))s" >&2

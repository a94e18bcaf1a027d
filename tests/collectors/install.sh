#!/usr/bin/env bash
# Installs the servers that the collector integration tests start:
#   - rotel (a Rust OpenTelemetry collector, from PyPI) and the MLflow tracking server, in a
#     Python venv at target/collectors/venv;
#   - Prometheus, from Debian's packages, when `prometheus` is not on PATH.
# and links them as target/collectors/bin/{rotel,mlflow,prometheus,promtool}.
#
# Idempotent and quick once installed (a stamp file records what the venv holds), and safe to
# run from several test processes at once (flock). Runs as root for apt-get; no service is
# left running (the tests start their own servers on free ports).
#
# Time on a 2-core machine: about 15 s for the venv on a cold package cache (uv; pip takes
# about 50 s), 10 s for apt-get update and prometheus, 0.2 s when everything is in place.
#
# Environment: COLLECTORS_DIR (default <repo>/target/collectors), PYTHON (default python3.11,
# else python3; 3.10 or newer).
set -euo pipefail

ROTEL_VERSION=0.0.1a15
MLFLOW_VERSION=3.17.2

. "$(dirname "${BASH_SOURCE[0]}")/../install_dir.sh"
install_dir COLLECTORS_DIR collectors
bin="$dir/bin"
stamp="$venv/.gpuspan-installed"
packages=("rotel==$ROTEL_VERSION" "mlflow==$MLFLOW_VERSION")
want="${packages[*]}"

started=$(date +%s)
say() { echo "install.sh: $*" >&2; }

# --- Python venv: rotel and mlflow ---------------------------------------------------------
if [[ ! -f "$stamp" || "$(cat "$stamp")" != "$want" ]]; then
    python="${PYTHON:-}"
    if [[ -z "$python" ]]; then
        if command -v python3.11 >/dev/null 2>&1; then python=python3.11; else python=python3; fi
    fi
    "$python" -c 'import sys; sys.exit(sys.version_info < (3, 10))' || {
        say "$python is $("$python" --version 2>&1); MLflow $MLFLOW_VERSION needs Python 3.10 or newer"
        exit 1
    }
    say "creating $venv with $("$python" --version 2>&1) and $want"
    rm -rf "$venv"
    "$python" -m venv "$venv"
    # uv resolves and installs mlflow's ~90 packages several times faster than pip.
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check uv
    "$venv/bin/python" -m uv pip install --quiet --python "$venv/bin/python" "${packages[@]}"
    echo "$want" >"$stamp"
fi

# --- Prometheus from Debian -----------------------------------------------------------------
if ! command -v prometheus >/dev/null 2>&1; then
    say "installing prometheus from Debian's packages"
    export DEBIAN_FRONTEND=noninteractive
    # The package's maintainer scripts try to start the service: forbid it for this install.
    if [[ ! -e /usr/sbin/policy-rc.d ]]; then
        printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
        chmod 755 /usr/sbin/policy-rc.d
        trap 'rm -f /usr/sbin/policy-rc.d' EXIT
    fi
    apt=(apt-get -qq -o DPkg::Lock::Timeout=300)
    "${apt[@]}" update
    "${apt[@]}" install -y --no-install-recommends prometheus >/dev/null || {
        say "apt-get install prometheus failed"
        exit 1
    }
fi

# --- Stable paths for the tests -------------------------------------------------------------
mkdir -p "$bin"
rotel_agent="$("$venv/bin/python" -c 'import pathlib, rotel; print(pathlib.Path(rotel.__file__).parent / "rotel-agent")')"
[[ -x "$rotel_agent" ]] || { say "the rotel wheel has no agent binary at $rotel_agent"; exit 1; }
ln -sfn "$rotel_agent" "$bin/rotel"
ln -sfn "$venv/bin/mlflow" "$bin/mlflow"
ln -sfn "$(command -v prometheus)" "$bin/prometheus"
ln -sfn "$(command -v promtool)" "$bin/promtool"

elapsed=$(( $(date +%s) - started ))
if (( elapsed > 1 )); then say "done in ${elapsed}s"; fi

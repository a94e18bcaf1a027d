#!/usr/bin/env bash
# A collector without Docker: rotel (a Rust OpenTelemetry collector, PyPI package `rotel`)
# receives gpuspan's OTLP on loopback and forwards the traces to Jaeger or Tempo over OTLP
# gRPC, as otelcol.yaml does; with no destination set it prints everything it receives.
#
#   collector/rotel.sh                                          # print spans and gauges
#   TRACES_ENDPOINT=http://127.0.0.1:14317 collector/rotel.sh   # traces to Jaeger (or Tempo)
#   OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4317 OTEL_EXPORTER_OTLP_PROTOCOL=grpc \
#     cargo run --release --example train
#
# Environment:
#   ROTEL_GRPC, ROTEL_HTTP  where rotel listens (default 127.0.0.1:4317, 127.0.0.1:4318)
#   TRACES_ENDPOINT         an OTLP gRPC receiver for the spans: Jaeger's or Tempo's (run them
#                           on other ports than rotel's, e.g. Jaeger on 14317). The rotel of
#                           rotel==0.0.1a15 takes one exporter per signal: for Jaeger and Tempo
#                           together, send to an OpenTelemetry Collector with otelcol.yaml.
#   METRICS_ENDPOINT        an OTLP gRPC receiver for the gauges (such as that collector);
#                           without it they are printed
#   ROTEL_DEBUG=1           also print what is forwarded
#   ROTEL_VENV              a venv with rotel==0.0.1a15 (default target/collectors/venv, made
#                           by tests/collectors/install.sh)
# rotel has no Prometheus scrape endpoint: for Prometheus, send the gauges to a collector
# (METRICS_ENDPOINT) or scrape gpuspan's own endpoint (GPUSPAN_PROMETHEUS_ADDR).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${ROTEL_VENV:-$repo/target/collectors/venv}"
if [[ ! -x "$venv/bin/python" ]]; then
    echo "rotel.sh: no venv at $venv: run tests/collectors/install.sh or set ROTEL_VENV" >&2
    exit 1
fi
agent="$("$venv/bin/python" -c 'import pathlib, rotel; print(pathlib.Path(rotel.__file__).parent / "rotel-agent")')"

args=(start
    --otlp-grpc-endpoint "${ROTEL_GRPC:-127.0.0.1:4317}"
    --otlp-http-endpoint "${ROTEL_HTTP:-127.0.0.1:4318}"
    --pid-file "${TMPDIR:-/tmp}/rotel-gpuspan.pid"
    --log-file "${TMPDIR:-/tmp}/rotel-gpuspan.log")

# Named exporters: --exporters NAME:TYPE,... and ROTEL_EXPORTER_<NAME>_* for their settings.
exporters=() traces=() metrics=() debug=()
if [[ -n "${TRACES_ENDPOINT:-}" ]]; then
    exporters+=(traces:otlp) traces+=(traces)
    export ROTEL_EXPORTER_TRACES_ENDPOINT="$TRACES_ENDPOINT" ROTEL_EXPORTER_TRACES_PROTOCOL=grpc
fi
if [[ -n "${METRICS_ENDPOINT:-}" ]]; then
    exporters+=(metrics:otlp) metrics+=(metrics)
    export ROTEL_EXPORTER_METRICS_ENDPOINT="$METRICS_ENDPOINT" ROTEL_EXPORTER_METRICS_PROTOCOL=grpc
fi

if (( ${#exporters[@]} == 0 )); then
    # Nothing to forward to: print every span and data point, then drop them.
    args+=(--exporter blackhole --debug-log traces --debug-log metrics --debug-log-verbosity detailed)
else
    if (( ${#traces[@]} == 0 )); then
        exporters+=(dropped:blackhole) traces+=(dropped) debug+=(--debug-log traces)
    fi
    if (( ${#metrics[@]} == 0 )); then
        [[ " ${exporters[*]} " == *" dropped:blackhole "* ]] || exporters+=(dropped:blackhole)
        metrics+=(dropped) debug+=(--debug-log metrics)
    fi
    [[ -z "${ROTEL_DEBUG:-}" ]] || debug=(--debug-log traces --debug-log metrics)
    join() { local IFS=,; echo "$*"; }
    args+=(--exporters "$(join "${exporters[@]}")"
        --exporters-traces "${traces[0]}"
        --exporters-metrics "${metrics[0]}")
    (( ${#debug[@]} == 0 )) || args+=("${debug[@]}" --debug-log-verbosity detailed)
fi

exec "$agent" "${args[@]}"

#!/usr/bin/env bash
# Builds, from the official Go modules, the two Go programs that the end-to-end collector tests
# start:
#   - otelcol-gpuspan: an OpenTelemetry Collector with exactly the components of
#     collector/otelcol.yaml and its overlays (the module in collector/otelcol-gpuspan);
#   - jaeger: Jaeger v2 (github.com/jaegertracing/jaeger/cmd/jaeger, pinned by the module in
#     tests/collectors/jaeger);
# into target/collectors/bin/.
#
# Idempotent and quick once built (a stamp file records the Go version and a hash of the
# modules' go.mod, go.sum and sources), and safe to run from several test processes at once
# (flock). The default Go caches (GOMODCACHE, GOCACHE) are used, so a second build on the
# same machine, or a build after a version bump, reuses what was downloaded and compiled.
#
# Time on a 2-core machine: on empty Go caches, 4.5 min to download the modules (1.6 min for
# the collector's, 2.9 min for Jaeger's) and 11.7 min of CPU to compile them (3.9 min and
# 7.8 min; so roughly 6 to 8 min of wall time on two idle cores); with a warm build cache
# 40 s to relink both; 0.05 s when the stamp matches.
#
# Environment: COLLECTORS_DIR (default <repo>/target/collectors), GO (default go; Go 1.26 or
# newer, the release the collector modules declare).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
dir="${COLLECTORS_DIR:-$repo/target/collectors}"
bin="$dir/bin"
stamp="$bin/.go-built"
go="${GO:-go}"
otelcol_module="$repo/collector/otelcol-gpuspan"
jaeger_module="$repo/tests/collectors/jaeger"

say() { echo "build-go.sh: $*" >&2; }

command -v "$go" >/dev/null 2>&1 || {
    say "no Go toolchain ('$go' is not on PATH); install Go 1.26 or newer, or set GO"
    exit 1
}
# Build with the toolchain that is installed: never download another one.
export GOTOOLCHAIN=local GOFLAGS="${GOFLAGS:--buildvcs=false} -mod=readonly"

mkdir -p "$bin"
exec 9>"$dir/build-go.lock"
flock 9

# Rebuild whenever the toolchain, this script or anything that pins or defines the programs
# changes.
want="$("$go" version)
$(cd "$repo" && cat tests/collectors/build-go.sh collector/otelcol-gpuspan/go.mod \
    collector/otelcol-gpuspan/go.sum collector/otelcol-gpuspan/*.go \
    tests/collectors/jaeger/go.mod tests/collectors/jaeger/go.sum | sha256sum | cut -d' ' -f1)"
if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" && -x "$bin/otelcol-gpuspan" && -x "$bin/jaeger" ]]; then
    exit 0
fi

started=$(date +%s)
rm -f "$stamp"
say "building otelcol-gpuspan ($(grep -m1 'collector/otelcol ' "$otelcol_module/go.mod" | awk '{print $2}'))"
(cd "$otelcol_module" && "$go" build -trimpath -ldflags="-s -w" -o "$bin/otelcol-gpuspan.new" .)
mv -f "$bin/otelcol-gpuspan.new" "$bin/otelcol-gpuspan"
say "building jaeger ($(grep -m1 'jaegertracing/jaeger ' "$jaeger_module/go.mod" | awk '{print $2}'))"
(cd "$jaeger_module" && "$go" build -trimpath -ldflags="-s -w" -o "$bin/jaeger.new" github.com/jaegertracing/jaeger/cmd/jaeger)
mv -f "$bin/jaeger.new" "$bin/jaeger"
echo "$want" >"$stamp"
say "done in $(($(date +%s) - started))s"

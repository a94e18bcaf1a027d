#!/usr/bin/env bash
# A user's step_span! loop against an earlier revision of gpuspan, side by side.
#
#   benches/against_revision.sh REV [PAIRS] [DEVICES] [ROUNDS] [CHUNK]
#
# Builds benches/step_wall.rs twice in release: against this tree, and against REV in a git
# worktree of its own (the same file copied in; it uses the public API only). Both read the
# same fake NVML (tests/fake_nvml/fake_nvml.c, DEVICES devices, default 8) and export to a
# fresh run directory each. Then it runs them in turn, this tree then REV, PAIRS times
# (default 10), and prints each pair's ratio this/REV of the time a step adds to an empty
# loop, their medians, and the CPU figures the kernel accounts to each side's threads
# (which the load of other programs does not inflate, unlike wall time).
#
# REV's worktree and its target directory go under target/against/ (AGAINST_DIR to put them
# elsewhere); the first build of a revision takes as long as a release build of gpuspan.
set -euo pipefail
cd "$(dirname "$0")/.."

REV=${1:?usage: benches/against_revision.sh REV [PAIRS] [DEVICES] [ROUNDS] [CHUNK]}
PAIRS=${2:-10}
DEVICES=${3:-8}
ROUNDS=${4:-30}
CHUNK=${5:-2000}
HERE=$PWD
DIR=${AGAINST_DIR:-$HERE/target/against}
SHA=$(git rev-parse --short "$REV^{commit}")
TREE="$DIR/$SHA"
mkdir -p "$DIR"

# The bench's executable after building it in $1 (a checkout) with target directory $2.
build() {
    (cd "$1" && CARGO_TARGET_DIR="$2" cargo bench --no-run --bench step_wall \
        --message-format=json-render-diagnostics) |
        python3 -c 'import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m["target"]["name"] == "step_wall" and m.get("executable"):
        print(m["executable"])'
}

if [ ! -d "$TREE" ]; then
    git worktree add --detach "$TREE" "$SHA" >&2
fi
cp benches/step_wall.rs "$TREE/benches/step_wall.rs"
if ! grep -q 'name = "step_wall"' "$TREE/Cargo.toml"; then
    printf '\n[[bench]]\nname = "step_wall"\nharness = false\n' >>"$TREE/Cargo.toml"
fi
echo "building this tree and $SHA (release)..." >&2
THIS_BIN=$(build "$HERE" "${CARGO_TARGET_DIR:-$HERE/target}")
REV_BIN=$(build "$TREE" "$TREE/target")

FAKE="$DIR/fake/libnvidia-ml.so.1"
mkdir -p "$DIR/fake"
cc -shared -fPIC -O2 -pthread -fvisibility=hidden -Wall -Wextra \
    -Wl,-soname,libnvidia-ml.so.1 -o "$FAKE" tests/fake_nvml/fake_nvml.c

OUT="$DIR/results-$SHA.jsonl"
: >"$OUT"
# One run of $2 labelled $1, in a clean environment with a fresh run directory.
run() {
    local runs
    runs=$(mktemp -d "$DIR/run.XXXXXX")
    env -i PATH="$PATH" HOME="${HOME:-/tmp}" GPUSPAN_NVML_LIB="$FAKE" \
        FAKE_NVML_DEVICES="$DEVICES" GPUSPAN_RUN_DIR="$runs" \
        "$2" "$ROUNDS" "$CHUNK" 2>/dev/null |
        grep '^{"devices"' | sed "s/^{/{\"side\": \"$1\", /" >>"$OUT"
    rm -rf "$runs"
}
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
run this "$THIS_BIN" # a warm-up of each, not counted
run "$SHA" "$REV_BIN"
: >"$OUT"
for _ in $(seq "$PAIRS"); do
    run this "$THIS_BIN"
    run "$SHA" "$REV_BIN"
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" >&2

python3 - "$OUT" "$SHA" <<'EOF'
import json, statistics, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
rev = sys.argv[2]
this = [r for r in rows if r["side"] == "this"]
base = [r for r in rows if r["side"] == rev]
med = statistics.median
print(f"{len(this)} pairs, {this[0]['devices']} devices, {this[0]['rounds']} chunks of {this[0]['chunk']} steps a run")
def line(what, key, unit, scale=1.0):
    a = [r[key] * scale for r in this]
    b = [r[key] * scale for r in base]
    ratios = [x / y for x, y in zip(a, b) if y]
    ratio = f"{med(ratios):.3f} (pairs {min(ratios):.3f} to {max(ratios):.3f})" if ratios else "-"
    print(f"{what:<44} {med(a):>10.2f} {med(b):>10.2f} {unit:<9} this/{rev}: {ratio}")
print(f"{'median of runs':<44} {'this':>10} {rev:>10}")
line("wall time a step adds to an empty loop", "added_ns", "ns")
line("training thread CPU per step", "training_cpu_ns_per_step", "ns")
line("training thread waiting for a core per step", "training_wait_ns_per_step", "ns")
def busy(name):
    return any(r["threads"].get(name, {}).get("wakeups_per_s", 0) > 0 for r in rows)
names = sorted(n for n in {n for r in rows for n in r["threads"]} if busy(n))
for name in names:
    for key, unit in (("cpu_ms_per_s", "ms/s"), ("wakeups_per_s", "/s")):
        a = [r["threads"].get(name, {}).get(key, 0.0) for r in this]
        b = [r["threads"].get(name, {}).get(key, 0.0) for r in base]
        ratios = [x / y for x, y in zip(a, b) if y]
        ratio = f"{med(ratios):.3f}" if ratios else "-"
        label = f"{name} {'CPU' if key == 'cpu_ms_per_s' else 'wake-ups'}"
        print(f"{label:<44} {med(a):>10.2f} {med(b):>10.2f} {unit:<9} this/{rev}: {ratio}")
EOF
echo "each run's figures: $OUT" >&2

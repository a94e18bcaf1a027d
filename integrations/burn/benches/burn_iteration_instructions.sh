#!/usr/bin/env bash
# Instructions per burn iteration, burn alone against gpuspan-burn, counted by callgrind:
# repeatable where wall time on a shared 2-core machine is not (the burn_iteration bench's
# wall and CPU medians move by 10 % between runs). Each side trains twice, with N and 2N
# iterations, in a child of the burn_iteration bench; the difference over N iterations
# leaves setup out. Counts are per thread: the training thread's, and all threads'
# (gpuspan's sampler and export threads, and burn's own, included). burn computes on one
# thread (RAYON_NUM_THREADS=1): its worker threads' spinning would otherwise move the counts.
#
# integrations/burn/benches/burn_iteration_instructions.sh [tiny|small ...]
set -euo pipefail
cd "$(dirname "$0")/../../.."
command -v valgrind >/dev/null || { echo "needs valgrind (Debian: apt-get install valgrind)" >&2; exit 1; }
cargo bench -p gpuspan-burn --bench burn_iteration --no-run 2>&1 | tail -1
bench=$(ls -t target/release/deps/burn_iteration-* | grep -v '\.d$' | head -1)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# Instructions of one run: "<training thread> <all threads>".
count() { # side size iterations
    RAYON_NUM_THREADS=1 valgrind --tool=callgrind --separate-threads=yes \
        --callgrind-out-file="$out/$1.$2.$3.%p" "$bench" --child "$1" "$2" "$3" >/dev/null 2>&1
    local main all=0 file
    main=$(awk '/^summary:/ {print $2}' "$out/$1.$2.$3".*-01)
    for file in "$out/$1.$2.$3".*-*; do
        all=$((all + $(awk '/^summary:/ {print $2}' "$file")))
    done
    echo "$main $all"
}

echo "instructions per iteration: burn alone / with gpuspan-burn = ratio"
sizes=("$@")
(( ${#sizes[@]} )) || sizes=(tiny small)
for size in "${sizes[@]}"; do
    n=$([[ $size == tiny ]] && echo 50 || echo 10)
    for side in alone gpuspan; do
        read -r m1 a1 < <(count "$side" "$size" "$n")
        read -r m2 a2 < <(count "$side" "$size" $((2 * n)))
        eval "${side}_main=$(((m2 - m1) / n)) ${side}_all=$(((a2 - a1) / n))"
    done
    awk -v s="$size" -v am="$alone_main" -v gm="$gpuspan_main" -v aa="$alone_all" -v ga="$gpuspan_all" 'BEGIN {
        printf "%-6s training thread %12d / %12d = %.4fx (%+d)\n", s, am, gm, gm / am, gm - am
        printf "%-6s all threads     %12d / %12d = %.4fx (%+d)\n", s, aa, ga, ga / aa, ga - aa
    }'
done

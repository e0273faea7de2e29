#!/usr/bin/env bash
# check_bench.sh BENCH_GATHER BENCH_COLLECTIVES: the benchmarks' figures mean what they say.
# bench_gather --threads 1 times the 1-thread f32 gather against itself, so the ratio it prints is
# about 1: with --rounds 1 its figures were each gather's first call, and the one that first
# touched the fresh output buffer (always the 1-thread one, the order's seed being fixed) came out
# 8-27x slower than itself. Single calls on a shared machine are noisy: the best of 3 runs must be
# within 3x.
set -u
gather=$1 coll=$2
fail() {
    echo "FAIL: $*"
    exit 1
}
# bench_collectives -f below 2: sizes that are the same whole count of floats are one row (4 B was
# timed and printed 8 times over from -b 4 -f 1.1, 8 B 4 times, 12 B 3 times)
out=$("$coll" --backend self -b 4 -e 16 -f 1.1 -r 1 -n 1 -w 0 2>&1) || fail "bench_collectives: $out"
sizes=$(awk '!/^#/ { printf "%s ", $1 }' <<<"$out")
[ "$sizes" = "4 8 12 " ] || fail "bench_collectives -b 4 -e 16 -f 1.1: rows of sizes '$sizes', expected '4 8 12 ': $out"
echo "PASS: bench_collectives -f 1.1: one row a size"
ratios=""
for try in 1 2 3; do
    out=$("$gather" --batch-size 128 --rounds 1 --threads 1 2>&1) || fail "bench_gather: $out"
    r=$(sed -n 's/^f32 set .*: 1 thread [0-9.]* ms, 1 thread [0-9.]* ms: \([0-9.]*\)x$/\1/p' <<<"$out")
    [ -n "$r" ] || fail "bench_gather printed no 1 thread against 1 thread ratio: $out"
    ratios="$ratios ${r}x"
    if awk -v r="$r" 'BEGIN { exit !(r > 1 / 3 && r < 3) }'; then
        echo "PASS: bench_gather --rounds 1 --threads 1: one thread against itself$ratios"
        exit 0
    fi
done
fail "bench_gather --rounds 1 --threads 1: one thread against itself$ratios in 3 runs (expected about 1x)"

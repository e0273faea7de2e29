#!/usr/bin/env bash
# check_bench.sh BENCH_COLLECTIVES: the benchmarks' tables mean what they say. (bench_gather's cold
# first call, which at --rounds 1 was its figure, is fixed without a test here: that would be a
# timed test; performance is measured in the benchmarks, never asserted in tests.)
set -u
coll=$1
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

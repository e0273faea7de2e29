#!/usr/bin/env bash
# check_batch_auto.sh CAP_MIB CMD...: runs fashion_resnet with --batch-size auto under a cap and checks
# the report: a batch was chosen by doubling then bisection (the trials fit exactly up to it, the
# next one up failed), its trial peak leaves 10% of the cap free, and training at that batch also
# stayed within 90% of the cap.
set -u
cap=$1; shift
out=$("$@" 2>&1); rc=$?
printf '%s\n' "$out"
fail() { echo "FAIL: $*"; exit 1; }
[ $rc -eq 0 ] || fail "exit status $rc"
line=$(grep '^batch-size auto:' <<<"$out") || fail "no 'batch-size auto:' line"
b=$(sed -n 's/^batch-size auto: \([0-9]*\) per rank.*/\1/p' <<<"$line")
[ -n "$b" ] && [ "$b" -ge 1 ] || fail "no batch"
# trials: "N fits (X MiB)" / "N out of memory (X MiB)"
trials=$(sed 's/.*trials://' <<<"$line" | tr ',' '\n' | sed -n 's/^ *\([0-9]*\) \(fits\|out of memory\) (\([0-9.]*\) \([KMG]i\?B\)).*/\1 \2 \3 \4/p' | sed 's/out of memory/oom/')
[ -n "$trials" ] || fail "no trials"
awk -v b="$b" -v cap="$cap" '
  function mib(v, u) { return u == "GiB" ? v * 1024 : u == "KiB" ? v / 1024 : u == "B" ? v / 1048576 : v }
  { n[NR] = $1; ok[NR] = $2 == "fits"; pk[NR] = mib($3, $4) }
  END {
    # doubling: each fitting trial before the first failure doubles the last
    i = 1; while (i < NR && ok[i]) { if (i > 1 && n[i] != 2 * n[i-1]) exit 1; i++ }
    first_fail = ok[i] ? 0 : n[i]
    lo = 0; hi = first_fail
    for (k = 1; k <= NR; k++) {
      if (ok[k] != (n[k] <= b)) exit 2                       # fits exactly up to the answer
      if (ok[k] && pk[k] > 0.9 * cap + 0.01) exit 3          # within the cap less the headroom
      if (k > i) { if (n[k] <= lo || (hi && n[k] >= hi)) exit 4   # bisection stays inside the bracket
                   if (ok[k]) lo = n[k]; else hi = n[k] }
      else if (ok[k]) lo = n[k]
    }
    if (hi && hi != b + 1) exit 5                             # ended on adjacent fit / failure
  }' <<<"$trials" || fail "trial sequence or peaks wrong (awk status $?)"
peak=$(sed -n 's/.*peak memory \([0-9.]*\) MiB.*/\1/p' <<<"$out" | tail -n 1)
[ -n "$peak" ] || fail "no epoch peak in MiB"
awk -v p="$peak" -v c="$cap" 'BEGIN { exit !(p <= 0.9 * c) }' || fail "training peak $peak MiB above 90% of $cap MiB"
# one rank: the largest batch the data allows is said so, with accumulation as a step's micro-batches
# (3 x 8 of 20 samples was "3 per rank, all of a rank's training samples")
if [[ $(basename "$1") == fashion_resnet ]]; then
    small=$("$1" --widths 4 --train-limit 20 --test-limit 8 --epochs 0 --batch-size auto --memory-cap 48MiB 2>&1) ||
        fail "--train-limit 20: $small"
    grep -q "^batch-size auto: 20 per rank, all of a rank's training samples (" <<<"$small" ||
        fail "--train-limit 20: not all 20 samples: $small"
    small=$("$1" --widths 4 --train-limit 20 --test-limit 8 --epochs 0 --batch-size auto --memory-cap 48MiB \
        --accum-steps 8 2>&1) || fail "--accum-steps 8: $small"
    grep -q "^batch-size auto: 3 per rank, x 8 accumulation: a step takes all of a rank's 20 training samples (" \
        <<<"$small" || fail "--accum-steps 8: $small"
fi
echo "PASS: batch $b per rank, training peak $peak MiB within 90% of $cap MiB"

#!/usr/bin/env bash
# check_oom_challenge.sh CMD...: runs oom_challenge (with --measure-baseline) and checks its claims:
# the baseline fails with the allocator's out-of-memory error naming the request, the cap (and where
# it comes from: the default, or LOCKSTEP_MEMORY_LIMIT) and the remedies; every remedy fits under the cap; all three together need the least; mixed precision
# needs about half of the uncapped baseline, a quarter of the batch about a quarter, checkpointing
# well under it. A timeline that cannot be written (/dev/full) is said once and the run goes on.
set -u
out=$("$@" 2>&1); rc=$?
printf '%s\n' "$out"
fail() { echo "FAIL: $*"; exit 1; }
[ $rc -eq 0 ] || fail "exit status $rc"
grep -q 'challenge met' <<<"$out" || fail "no 'challenge met' line"
grep -q 'out of memory on cpu: cannot allocate .* the cap is .* is already in use' <<<"$out" || fail "no allocator error"
grep -qF 'the cap is 384.00 MiB (the default 384MiB), ' <<<"$out" || fail "the error does not say where the cap comes from"
for flag in '--batch-size' '--precision bf16|fp16' '--checkpoint-activations'; do
  grep -qF -- "$flag" <<<"$out" || fail "the error does not name $flag"
done
# peak memory column in MiB for a row
mib() {
  awk -v row="$1" 'index($0, row) == 1 {
      for (i = 1; i <= NF; i++) if ($i ~ /^(B|KiB|MiB|GiB)$/) { v = $(i-1); u = $i }
      f = u == "GiB" ? 1024 : u == "KiB" ? 1/1024 : u == "B" ? 1/1048576 : 1; printf "%.2f\n", v * f; exit }' <<<"$out"
}
cap=$(sed -n 's/.*cap \([0-9.]*\) MiB per rank.*/\1/p' <<<"$out")
[ -n "$cap" ] || fail "no cap in MiB"
small=$(mib "smaller batch"); mixed=$(mib "mixed precision"); ckpt=$(mib "activation checkpointing")
all=$(mib "all three"); need=$(mib "baseline, uncapped")
echo "cap $cap MiB: baseline needs $need, smaller batch $small, mixed precision $mixed, checkpointing $ckpt, all $all"
awk -v c="$cap" -v n="$need" -v s="$small" -v m="$mixed" -v k="$ckpt" -v a="$all" 'BEGIN {
  ok = n > c && s <= c && m <= c && k <= c && a <= c;
  ok = ok && a < s && a < m && a < k;                  # all three together need the least
  ok = ok && m / n > 0.40 && m / n < 0.60;             # bf16 activations: about half
  ok = ok && s / n > 0.15 && s / n < 0.35;             # a quarter of the batch: about a quarter
  ok = ok && k / n < 0.60;                             # checkpointing: well under the baseline
  exit !ok }' || fail "peak memories out of the expected order or ratios"
grep -E '^(smaller batch|mixed precision|activation checkpointing|all three) ' <<<"$out" | grep -qv ' yes$' && fail "a remedy row is not 'yes'"
# on the CPU, LOCKSTEP_MEMORY_LIMIT is the default cap (it was ignored for 384 MiB), and said so
small_out=$(LOCKSTEP_MEMORY_LIMIT=6MiB "$1" --widths 4,8 --blocks 1 --image-size 16 --batch-size 64 --steps 1 2>&1) ||
    fail "LOCKSTEP_MEMORY_LIMIT=6MiB: $small_out"
grep -q 'cap 6.00 MiB per rank' <<<"$small_out" || fail "LOCKSTEP_MEMORY_LIMIT=6MiB is not the cap: $small_out"
grep -qF 'the cap is 6.00 MiB (LOCKSTEP_MEMORY_LIMIT=6MiB), ' <<<"$small_out" || fail "the cap's source unsaid: $small_out"
# a model that does not fit, whatever the batch: said so, with what can help (it was "failed as
# expected", with batch advice that cannot help)
tiny_out=$("$1" --steps 1 --memory-cap 1e3 2>&1)
[ $? -eq 1 ] || fail "--memory-cap 1e3: exit status not 1: $tiny_out"
grep -qF 'baseline (batch 256, fp32, no checkpointing) failed while its model was made, before any step:' <<<"$tiny_out" ||
    fail "--memory-cap 1e3: the baseline's failure not said to be the model's: $tiny_out"
grep -qF 'does not fit whatever the batch: a larger --memory-cap, or a smaller model (--widths, --blocks)' <<<"$tiny_out" ||
    fail "--memory-cap 1e3: no model remedy: $tiny_out"
grep -qxF 'challenge NOT met: the model itself does not fit the cap, whatever the batch (a larger --memory-cap, or smaller --widths or --blocks)' <<<"$tiny_out" ||
    fail "--memory-cap 1e3: no verdict on the model: $tiny_out"
grep -q 'failed as expected' <<<"$tiny_out" && fail "--memory-cap 1e3: 'failed as expected': $tiny_out"
# remedies that fail with a smaller batch of 1 already: a smaller --small-batch cannot help, and
# is not advised (it was)
one_out=$("$1" --steps 1 --batch-size 4 --memory-cap 3MiB 2>&1)
[ $? -eq 1 ] || fail "--batch-size 4 --memory-cap 3MiB: exit status not 1: $one_out"
grep -qE '^all three +1  bf16 .* no: out of memory$' <<<"$one_out" ||
    fail "--batch-size 4 --memory-cap 3MiB: all three at batch 1 did not run out of memory: $one_out"
grep -qxF 'challenge NOT met: a remedy does not fit the cap (see the table; a larger --memory-cap)' <<<"$one_out" ||
    fail "--batch-size 4 --memory-cap 3MiB: the verdict advises what cannot help: $one_out"
# a timeline whose write fails (a full disk) stops, and the run goes on, as the README says: each
# configuration's trainer after the first failed, "LOCKSTEP_TIMELINE: timeline: '/dev/full' is
# already being written; close it first"
if [ -w /dev/full ]; then
    full_out=$(LOCKSTEP_MEMORY_LIMIT=6MiB LOCKSTEP_TIMELINE=/dev/full "$1" --widths 4,8 --blocks 1 --image-size 16 \
        --batch-size 64 --steps 1 2>&1) || fail "LOCKSTEP_TIMELINE=/dev/full: $full_out"
    [ "$(grep -c "timeline: writing '/dev/full' failed: No space left on device; the trace stops here" <<<"$full_out")" = 1 ] &&
        grep -q 'challenge met' <<<"$full_out" || fail "LOCKSTEP_TIMELINE=/dev/full: not said once, or no verdict: $full_out"
fi
echo "PASS"

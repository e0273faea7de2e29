#!/usr/bin/env bash
# check_batch_auto_resume.sh FASHION_RESNET: a checkpoint saved by a run with --batch-size auto,
# resumed with --batch-size auto under another cap, finds another batch. The run says what the
# search found beside the checkpoint's batch and what to do: under a larger cap the saved batch
# fits (give it to continue bitwise); under a smaller one it does not (training goes on at the
# batch found). Under the same cap, or with the batch given, nothing more is said.
set -u
prog=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
run() { # CAP ARGS...
    local cap=$1; shift
    LOCKSTEP_MEMORY_LIMIT=$cap "$prog" --widths 4 --train-limit 64 --test-limit 8 --epochs 1 \
        --checkpoint-dir "$dir/ck" "$@" 2>&1
}
out=$(run 2MiB --batch-size auto --max-steps 2) || fail "first run: $out"
grep -q '^batch-size auto: 9 per rank' <<<"$out" || fail "first run not at batch 9: $out"
# a larger cap: 14 found, the saved 9 fits
out=$(run 3MiB --batch-size auto --resume auto --max-steps 3) || fail "resume under 3MiB: $out"
printf '%s\n' "$out"
grep -qF "fashion_resnet: --batch-size auto found 14 per rank, the checkpoint was trained at 9: give --batch-size 9 (it fits) to continue it bitwise" <<<"$out" ||
    fail "no note under the larger cap"
# a smaller cap: 8 found, the saved 9 does not fit
out=$(run 1800KiB --batch-size auto --resume "$dir/ck/step-00000002" --max-steps 3 --keep-last 0) ||
    fail "resume under 1800KiB: $out"
printf '%s\n' "$out"
grep -qF "fashion_resnet: --batch-size auto found 8 per rank, the checkpoint was trained at 9, which does not fit this cap: training goes on at 8, not bitwise" <<<"$out" ||
    fail "no note under the smaller cap"
# the same cap: the same batch, no note; a batch given: no note either
for args in "--batch-size auto" "--batch-size 8"; do
    out=$(run 2MiB $args --resume "$dir/ck/step-00000002" --max-steps 3 --keep-last 0) || fail "$args: $out"
    ! grep -q "found .* per rank, the checkpoint was trained at" <<<"$out" || fail "$args: a note: $out"
done
echo PASS

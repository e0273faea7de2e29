#!/usr/bin/env bash
# resume_bitwise.sh MLP MPIRUN NP: 40 steps straight equal, bit for bit (parameters and every step's
# loss), 20 steps + a run killed in the middle of its next save (LOCKSTEP_CKPT_CRASH_AT) + resume to
# step 37 (crossing an epoch) + resume to 40. Global batch 32 (32/NP per rank), 32 steps an epoch.
MLP=$1 MPIRUN=$2 NP=$3
. "$(dirname "$0")/lib.sh"
A=(--train-limit 1000 --test-limit 200 --batch-size $((32 / NP)) --epochs 3 --no-progress --checkpoint-dir "$tmp/D")

mlp "$NP" "${A[@]}" --max-steps 40 --log-steps A.log --dump-params A.bin
expect_rc 0
[ "$(wc -l <A.log)" -eq 40 ] || fail "straight run logged $(wc -l <A.log) steps, expected 40"

mlp "$NP" "${A[@]}" --max-steps 20 --save-every 20 --log-steps B.log
expect_rc 0
expect_out "fashion_mlp: saved checkpoint $tmp/D/step-00000020 (step 20)"
[ "$(cat D/latest)" = step-00000020 ] || fail "latest is '$(cat D/latest)'"

# Killed while saving step 25, after its manifest, before the directory rename: step 20 stays.
LOCKSTEP_CKPT_CRASH_AT=before-rename mlp "$NP" "${A[@]}" --resume auto --max-steps 25 --save-every 20 --log-steps B.log
[ "$rc" -ne 0 ] || fail "the run that was killed while saving exited 0"
expect_out "LOCKSTEP_CKPT_CRASH_AT=before-rename"
[ -d D/step-00000025.tmp ] && [ ! -e D/step-00000025 ] || fail "expected only the debris D/step-00000025.tmp"
[ "$(tail -n 1 B.log | cut -d' ' -f1)" = 25 ] || fail "B.log should end at step 25 before the resume"

mlp "$NP" "${A[@]}" --resume auto --max-steps 37 --save-every 20 --log-steps B.log
expect_rc 0
expect_out "fashion_mlp: resumed from $tmp/D/step-00000020 at step 20, epoch 1 (step 20 of 32 in the epoch)"
expect_out "fashion_mlp: saved checkpoint $tmp/D/step-00000037 (step 37)"
[ ! -e D/step-00000025.tmp ] || fail "the next save did not remove D/step-00000025.tmp"

mlp "$NP" "${A[@]}" --resume auto --max-steps 40 --save-every 20 --log-steps B.log --dump-params B.bin
expect_rc 0
expect_out "fashion_mlp: resumed from $tmp/D/step-00000037 at step 37, epoch 2 (step 5 of 32 in the epoch)"
expect_out "fashion_mlp: stopped at step 40 (--max-steps)"

cmp A.bin B.bin || fail "parameters after 40 steps differ between the straight and the resumed runs"
cmp A.log B.log || { diff A.log B.log | head; fail "per-step losses differ"; }
[ "$(ls -d D/step-* | wc -l)" -eq 3 ] || fail "--keep-last 3 left $(ls -d D/step-* | wc -l) checkpoints"
echo "PASS: $NP rank(s): 20 + crash + 17 + 3 steps equal 40 straight, bit for bit ($(wc -c <A.bin) parameter bytes, 40 losses)"

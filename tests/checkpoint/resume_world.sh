#!/usr/bin/env bash
# resume_world.sh PROG MPIRUN: a checkpoint saved by 2 ranks x 16 resumes on 1 rank x 32 (same
# global batch: the losses follow the 2-rank run's to 1e-4) and on 3 ranks x 16 (global batch 48:
# the position is rounded up to the next step boundary, said so, and training continues; rounded
# past the epoch's last step, to the next epoch, saying so); the learning-rate
# schedule goes on from the data's position in this run's steps.
PROG=$1 MPIRUN=$2
. "$(dirname "$0")/lib.sh"
A=(--train-limit 1000 --test-limit 200 --epochs 3 --no-progress)

train 2 "${A[@]}" --batch-size 16 --max-steps 30 --log-steps W.log
expect_rc 0
train 2 "${A[@]}" --batch-size 16 --max-steps 20 --save-every 20 --checkpoint-dir D
expect_rc 0

train 1 "${A[@]}" --batch-size 32 --max-steps 30 --resume "$tmp/D/step-00000020" --checkpoint-dir D1 --log-steps R1.log
expect_rc 0
expect_out "$NAME: resumed from $tmp/D/step-00000020 at step 20, epoch 1 (step 20 of 32 in the epoch)"
expect_out "the checkpoint was written by 2 rank(s) x batch 16 x 1 accumulation, this run has 1 x 32 x 1"
[ "$(wc -l <R1.log)" -eq 10 ] && [ "$(head -n 1 R1.log | cut -d' ' -f1)" = 21 ] || fail "R1.log should hold steps 21-30"
tail -n 10 W.log | paste -d' ' - R1.log | awk '{ d = $2 - $4; if (d < 0) d = -d; if ($1 != $3 || d > 1e-4 * $2) { print "step " $1 ": " $2 " vs " $4; bad = 1 } } END { exit bad }' ||
    fail "1-rank continuation departs from the 2-rank run"

train 3 "${A[@]}" --batch-size 16 --max-steps 30 --save-every 10 --resume "$tmp/D/step-00000020" --checkpoint-dir D3 --log-steps R3.log \
    --metrics R3.json
expect_rc 0
expect_out "the checkpoint had consumed 640 samples of epoch 1, not a multiple of this run's global batch of 48: continuing at the next step boundary (32 samples skipped)"
expect_out "$NAME: resumed from $tmp/D/step-00000020 at step 20, epoch 1 (step 14 of 21 in the epoch)"
# the schedule goes on from where the data is, in this run's steps (14 of 63), not from the saved
# step count (20): its lr is a fresh 3-rank run's at step 15 (at twice the batch the old count
# put the schedule at its end)
expect_out "$NAME: the learning-rate schedule continues from its step 14 of 63 (the samples consumed in steps of this run's global batch), not from the saved step count 20"
train 3 "${A[@]}" --batch-size 16 --max-steps 15 --metrics F3.json
expect_rc 0
python3 -c 'import json, sys
a = json.loads(open(sys.argv[1]).readline())["lr"]
b = json.loads(open(sys.argv[2]).read().splitlines()[14])["lr"]
sys.exit(a != b)' R3.json F3.json || fail "the resumed lr $(head -c 120 R3.json) is not the fresh run's at step 15"
[ "$(wc -l <R3.log)" -eq 10 ] || fail "R3.log should hold steps 21-30"
awk '{ if (!($2 > 0 && $2 < 2.0)) { print "step " $1 " loss " $2; bad = 1 } } END { exit bad }' R3.log || fail "implausible losses after the 3-rank resume"
grep -q '"world_size":[[:space:]]*3' D3/step-00000030/state.json || fail "the 3-rank checkpoint does not record world size 3"
# saved at step 31 of 32 (992 samples): on 3 ranks the next boundary, ceil(992 / 48) = 21, is the
# epoch's end (21 steps), so the rest of epoch 1 is skipped and epoch 2 begins (it said -992
# skipped, then "16 samples skipped" of the 10 left: 3 ranks pad 1000 to 1002)
train 2 "${A[@]}" --batch-size 16 --max-steps 31 --save-every 31 --checkpoint-dir D31
expect_rc 0
train 3 "${A[@]}" --batch-size 16 --max-steps 32 --resume "$tmp/D31/step-00000031" --checkpoint-dir D32
expect_rc 0
expect_out "the checkpoint had consumed 992 samples of epoch 1, not a multiple of this run's global batch of 48: continuing at the start of epoch 2 (the rest of epoch 1, less than a global batch, skipped)"
expect_out "$NAME: resumed from $tmp/D31/step-00000031 at step 31, the end of epoch 1"
echo "PASS: a 2-rank checkpoint resumes on 1 rank (losses within 1e-4) and on 3 ranks (rounded to step 14;" \
    "at the epoch's last step, to the next epoch)"

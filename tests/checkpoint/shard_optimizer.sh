#!/usr/bin/env bash
# shard_optimizer.sh PROG MPIRUN NP SHARES [ARGS...]: --shard-optimizer (ZeRO stage 1) on NP ranks
# trains as the unsharded run, bit for bit (parameters and buffers, every step's loss), and writes
# the same checkpoint files (model.safetensors, optimizer.safetensors, state.json: the state gathered
# on rank 0); a sharded run resumed from the unsharded run's checkpoint (the state sent to its
# owners) continues bit for bit too. SHARES: the expected "ranks 0..NP-1 keep the state of ..."
# figures (ZeroRedundancyOptimizer's partition), or - for any. 30 steps over 960 samples, global
# batch 48: the runs cross an epoch. ARGS go to every run.
PROG=$1 MPIRUN=$2 NP=$3 SHARES=$4
shift 4
. "$(dirname "$0")/lib.sh"
A=(--train-limit 960 --test-limit 200 --batch-size $((48 / NP)) --epochs 2 --no-progress "$@")

train "$NP" "${A[@]}" --max-steps 30 --save-every 15 --checkpoint-dir U --log-steps U.log --dump-params U.bin
expect_rc 0
train "$NP" "${A[@]}" --shard-optimizer --max-steps 30 --save-every 15 --checkpoint-dir S --log-steps S.log \
    --dump-params S.bin
expect_rc 0
line=$(grep -F "$NAME: optimizer state sharded over $NP ranks (ZeRO stage 1): ranks 0..$((NP - 1)) keep the state of" out) ||
    fail "no line on the optimizer's shards"
[ "$SHARES" = - ] || [[ "$line" == *"keep the state of $SHARES of the "* ]] || fail "shards: '$line', expected '$SHARES'"
cmp U.bin S.bin || fail "parameters after 30 steps differ with --shard-optimizer"
cmp U.log S.log || { diff U.log S.log | head; fail "per-step losses differ with --shard-optimizer"; }
for step in 00000015 00000030; do
    for f in model.safetensors optimizer.safetensors state.json; do
        cmp "U/step-$step/$f" "S/step-$step/$f" || fail "step $step: $f differs with --shard-optimizer"
    done
done

# the unsharded run's step-15 checkpoint, resumed sharded: rank 0 reads the state, the owners get theirs
head -n 15 U.log >R.log
train "$NP" "${A[@]}" --shard-optimizer --resume "$tmp/U/step-00000015" --max-steps 30 --checkpoint-dir R \
    --log-steps R.log --dump-params R.bin
expect_rc 0
expect_out "$NAME: resumed from $tmp/U/step-00000015 at step 15"
cmp U.bin R.bin || fail "a sharded resume of an unsharded checkpoint departs from the straight run"
cmp U.log R.log || { diff U.log R.log | head; fail "per-step losses differ after the sharded resume"; }
echo "PASS: --shard-optimizer on $NP ranks: the same parameters, losses and checkpoint files; resumed alike"

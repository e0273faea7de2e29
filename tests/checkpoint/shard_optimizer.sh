#!/usr/bin/env bash
# shard_optimizer.sh PROG MPIRUN NP SHARES [ARGS...]: --shard-optimizer (ZeRO stage 1) on NP ranks
# trains as the unsharded run, bit for bit (parameters and buffers, every step's loss), and writes
# the same checkpoint files (model.safetensors, optimizer.safetensors, state.json: the state gathered
# on rank 0); a sharded run resumed from the unsharded run's checkpoint (the state sent to its
# owners) continues bit for bit too. SHARES: the expected "ranks 0..NP-1 keep the state of ..."
# figures (ZeroRedundancyOptimizer's partition), or - for any. 30 steps over 960 samples, global
# batch 48: the runs cross an epoch. ARGS go to every run.
# Sharded runs reduce each gradient to its owner (LOCKSTEP_SHARD_REDUCE=owner, the default): on 2
# ranks the same sums as the all-reduce's. On more, MPI's reduce adds the ranks' gradients in another
# order, so there the bitwise comparisons take LOCKSTEP_SHARD_REDUCE=all, and a default run is checked
# against the unsharded one within rounding (losses, parameters, the same files), resumed from its
# own checkpoint bit for bit, and resumed on 2 ranks (another partition) within rounding.
PROG=$1 MPIRUN=$2 NP=$3 SHARES=$4
shift 4
. "$(dirname "$0")/lib.sh"
A=(--train-limit 960 --test-limit 200 --batch-size $((48 / NP)) --epochs 2 --no-progress "$@")

train "$NP" "${A[@]}" --max-steps 30 --save-every 15 --checkpoint-dir U --log-steps U.log --dump-params U.bin
expect_rc 0
[ "$NP" -gt 2 ] && export LOCKSTEP_SHARD_REDUCE=all
train "$NP" "${A[@]}" --shard-optimizer --max-steps 30 --save-every 15 --checkpoint-dir S --log-steps S.log \
    --dump-params S.bin
expect_rc 0
line=$(grep -F "$NAME: optimizer state sharded over $NP ranks (ZeRO stage 1): ranks 0..$((NP - 1)) keep the state of" out) ||
    fail "no line on the optimizer's shards"
[ "$SHARES" = - ] || [[ "$line" == *"keep the state of $SHARES of the "* ]] || fail "shards: '$line', expected '$SHARES'"
how="reduced to their owners"
[ "$NP" -gt 2 ] && how=all-reduced
[[ "$line" == *"parameters; gradients $how" ]] || fail "shards: '$line' does not say the gradients are $how"
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
unset LOCKSTEP_SHARD_REDUCE

if [ "$NP" -gt 2 ]; then # gradients reduced to their owners, in MPI_Reduce's order
    train "$NP" "${A[@]}" --shard-optimizer --max-steps 30 --save-every 15 --checkpoint-dir O --log-steps O.log \
        --dump-params O.bin
    expect_rc 0
    expect_out "parameters; gradients reduced to their owners"
    for f in model.safetensors optimizer.safetensors state.json manifest.json; do
        [ -f "O/step-00000030/$f" ] || fail "reduced to owners: no $f in the step-30 checkpoint"
    done
    [ "$(stat -c %s O/step-00000030/optimizer.safetensors)" = "$(stat -c %s U/step-00000030/optimizer.safetensors)" ] ||
        fail "reduced to owners: optimizer.safetensors is not the unsharded run's size"
    /usr/bin/python3 - U.log O.log U.bin O.bin <<'PY' || fail "reduced to owners: not the unsharded run within rounding"
import array, sys
u, o = [[float(l.split()[1]) for l in open(f)] for f in sys.argv[1:3]]
assert len(u) == len(o) == 30, (len(u), len(o))
worst = max(abs(a - b) / abs(a) for a, b in zip(u, o))
assert worst <= 1e-4, "losses: relative difference %g" % worst
pu, po = array.array("f"), array.array("f")
pu.frombytes(open(sys.argv[3], "rb").read()); po.frombytes(open(sys.argv[4], "rb").read())
assert len(pu) == len(po)
d = max(abs(a - b) for a, b in zip(pu, po)) / max(abs(a) for a in pu)
assert d <= 1e-4, "parameters: relative difference %g" % d
print("reduced to owners: losses within %.3g, parameters within %.3g of the unsharded run" % (worst, d))
PY
    head -n 15 O.log >O2.log
    train "$NP" "${A[@]}" --shard-optimizer --resume "$tmp/O/step-00000015" --max-steps 30 --checkpoint-dir O2 \
        --log-steps O2.log --dump-params O2.bin
    expect_rc 0
    cmp O.bin O2.bin || fail "reduced to owners: the resumed run departs from the straight one"
    cmp O.log O2.log || { diff O.log O2.log | head; fail "reduced to owners: losses differ after the resume"; }
    # the same checkpoint on 2 ranks (the global batch kept): their shares are another partition,
    # each rank's sent from the file; the run continues as the NP-rank one, within rounding
    head -n 15 O.log >W.log
    train 2 --train-limit 960 --test-limit 200 --batch-size 24 --epochs 2 --no-progress "$@" --shard-optimizer \
        --resume "$tmp/O/step-00000015" --max-steps 30 --log-steps W.log --dump-params W.bin
    expect_rc 0
    expect_out "$NAME: optimizer state sharded over 2 ranks"
    /usr/bin/python3 - O.log W.log O.bin W.bin "$NP" <<'PY' || fail "resumed on 2 ranks: not the $NP-rank run within rounding"
import array, sys
o, w = [[float(l.split()[1]) for l in open(f)] for f in sys.argv[1:3]]
assert len(o) == len(w) == 30, (len(o), len(w))
worst = max(abs(a - b) / abs(a) for a, b in zip(o, w))
po, pw = array.array("f"), array.array("f")
po.frombytes(open(sys.argv[3], "rb").read()); pw.frombytes(open(sys.argv[4], "rb").read())
d = max(abs(a - b) for a, b in zip(po, pw)) / max(abs(a) for a in po)
assert worst <= 1e-4 and d <= 1e-4, "losses within %g, parameters within %g" % (worst, d)
print("resumed on 2 ranks: losses within %.3g, parameters within %.3g of the %s-rank run" % (worst, d, sys.argv[5]))
PY
fi
echo "PASS: --shard-optimizer on $NP ranks: the same parameters, losses and checkpoint files; resumed alike"

#!/usr/bin/env bash
# check_resnet_dropout.sh PROG MPIRUN: fashion_resnet --dropout 0.3 (a Dropout before the
# classifier, timm's drop_rate) on a narrow ResNet, 8 steps of a global batch of 32 with
# synchronized batch norm: on 1 rank and (MPIRUN not none) on 2 ranks of 16 the parameters and
# running statistics agree within 1e-5 of their largest value, each sample's mask being a function
# of the sample and the step alone (the run without dropout agrees to 2e-6 here; masks drawn per
# rank would not agree at all); the run without dropout is far from them (the masks took effect);
# --checkpoint-activations is bit for bit the first run (the recomputed forward draws the same
# masks); --precision fp16 trains with dropout too; a checkpoint records the dropout, and its
# resume on 2 ranks (the same flags) finds the same model.
PROG=$1 MPIRUN=$2
. "$(dirname "$0")/../checkpoint/lib.sh"
B=(--widths 8,16 --train-limit 1000 --test-limit 200 --epochs 1 --max-steps 8 --sync-bn --no-progress)

dropout_runs fp16 "${B[@]}"

train 1 "${B[@]}" --dropout 0.3 --batch-size 32 --save-every 8 --checkpoint-dir C
expect_rc 0
python3 -c 'import json, sys; sys.exit(json.load(open(sys.argv[1]))["dropout"] != 0.3)' C/step-00000008/state.json ||
    fail "C/step-00000008/state.json does not record dropout 0.3"
# the checkpoint of 1 rank with --sync-bn, resumed with the same flags on 2 ranks: the same model
# (its batch norms were recorded as unsynchronized on 1 rank, so the resume warned that the model's
# layers differed, 'relu' against 'relu, sync', where only the world size had changed)
if [ "$MPIRUN" != none ]; then
    train 2 "${B[@]}" --dropout 0.3 --batch-size 16 --resume C/step-00000008 --max-steps 9
    expect_rc 0
    expect_out "resumed from C/step-00000008 at step 8"
    ! grep -q "the model is not the checkpoint's" "$tmp/out" || fail "--sync-bn resumed on 2 ranks: $(grep -m1 "the model is not" "$tmp/out")"
fi
echo "PASS"

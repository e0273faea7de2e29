#!/usr/bin/env bash
# check_resnet_freeze.sh PROG MPIRUN: fashion_resnet --freeze-backbone (fine-tuning the classifier
# alone) on a narrow ResNet (widths 8,16: 5122 parameters, the classifier's 16 x 10 + 10 last): 4
# steps leave every other parameter bitwise as initialized (the --epochs 0 run's --dump-params) and
# move the classifier; rank 0 says how many parameters train; on 2 ranks of 16 (MPIRUN not none;
# synchronized batch norm, so that the features are those of 1 rank) the
# backbone is the same bits too and the classifier within 1e-5 of 1 rank's.
PROG=$1 MPIRUN=$2
. "$(dirname "$0")/../checkpoint/lib.sh"
B=(--widths 8,16 --train-limit 256 --test-limit 32 --max-steps 4 --sync-bn --no-progress)
backbone=$(((5122 - 170) * 4)) # bytes of the parameters before the classifier's in a dump

train 1 "${B[@]}" --batch-size 32 --epochs 0 --dump-params init.bin
expect_rc 0
train 1 "${B[@]}" --batch-size 32 --epochs 1 --freeze-backbone --dump-params one.bin
expect_rc 0
expect_out "fashion_resnet: --freeze-backbone: 170 of the 5122 parameters train (the classifier)"
cmp -s -n "$backbone" init.bin one.bin || fail "--freeze-backbone changed the backbone: $(cmp -n "$backbone" init.bin one.bin)"
cmp -s -i "$backbone" -n 680 init.bin one.bin && fail "--freeze-backbone left the classifier as initialized"
echo "PASS: 1 rank: the backbone as initialized, the classifier trained"
if [ "$MPIRUN" != none ]; then
    train 2 "${B[@]}" --batch-size 16 --epochs 1 --freeze-backbone --dump-params two.bin
    expect_rc 0
    cmp -s -n "$backbone" init.bin two.bin || fail "2 ranks: --freeze-backbone changed the backbone"
    d=$(reldiff <(head -c $((backbone + 680)) one.bin | tail -c 680) <(head -c $((backbone + 680)) two.bin | tail -c 680))
    within "$d" 1e-5 || fail "2 ranks: the classifier differs from 1 rank's by $d of its largest value"
    echo "PASS: 2 ranks: the backbone as initialized, the classifier within $d of 1 rank's"
fi
echo "PASS"

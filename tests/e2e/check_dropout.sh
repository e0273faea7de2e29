#!/usr/bin/env bash
# check_dropout.sh PROG MPIRUN: fashion_mlp --dropout 0.3, 30 steps of a global batch of 32 on 1
# rank, on 1 rank of 16 x 2 accumulation steps, and (MPIRUN not none) on 2 ranks of 16: the
# parameters agree within 1e-5 of their largest value, since each sample's mask is a function of
# the sample and the step alone; the same run without dropout is far from them (the masks took
# effect); --checkpoint-activations is bit for bit the first run (the recomputed forward draws the
# same masks); --precision bf16 trains with dropout too. A checkpoint records the dropout and the
# model's layers (state.json), and a resume with another dropout or activation warns; one without
# the dropout is refused, saying that the layers differ.
PROG=$1 MPIRUN=$2
. "$(dirname "$0")/../checkpoint/lib.sh"
B=(--train-limit 1000 --test-limit 200 --epochs 1 --max-steps 30 --no-progress)

dropout_runs bf16 "${B[@]}"

train 1 "${B[@]}" --dropout 0.3 --batch-size 16 --accum-steps 2 --dump-params accum.bin
expect_rc 0
d=$(reldiff one.bin accum.bin)
echo "1 rank x 32 against 1 rank x 16 x 2 accumulation: $d"
within "$d" 1e-5 || fail "accumulation changed the run by $d of the largest parameter"
C=(--train-limit 1000 --test-limit 200 --epochs 1 --no-progress --batch-size 32 --checkpoint-dir C)
train 1 "${C[@]}" --dropout 0.3 --max-steps 10 --save-every 10
expect_rc 0
python3 -c 'import json, sys; sys.exit(json.load(open(sys.argv[1]))["dropout"] != 0.3)' C/step-00000010/state.json ||
    fail "C/step-00000010/state.json does not record dropout 0.3"
train 1 "${C[@]}" --dropout 0.1 --max-steps 12 --resume auto
expect_rc 0
expect_out "dropout changed since the checkpoint: saved 0.3, now 0.1; this run's applies"
expect_out "the model is not the checkpoint's, though its parameters are: its layers differ: entry 2 is 'Dropout(p=0.3)' in the checkpoint but 'Dropout(p=0.1)' in this model; this model's apply"
# state.json records the model's layers: a resume without the dropout, whose parameters are named
# after other layers, says why; one with another activation, whose parameters agree, warns (it
# resumed without a word)
python3 -c 'import json, sys; sys.exit(json.load(open(sys.argv[1]))["layers"] != ["Linear", "ReLU", "Dropout(p=0.3)", "Linear", "ReLU", "Dropout(p=0.3)", "Linear"])' \
    C/step-00000010/state.json || fail "C/step-00000010/state.json does not list the layers"
train 1 "${C[@]}" --max-steps 12 --resume C/step-00000010
expect_rc 1
expect_out "parameter 2 is '3.weight' [256, 512] F32 in the checkpoint but '2.weight' [256, 512] F32 in this model (a different model: its layers differ: entry 2 is 'Dropout(p=0.3)' in the checkpoint but 'Linear' in this model)"
train 1 "${C[@]}" --dropout 0.3 --activation gelu --max-steps 12 --resume C/step-00000010
expect_rc 0
expect_out "the model is not the checkpoint's, though its parameters are: its layers differ: entry 1 is 'ReLU' in the checkpoint but 'GELU' in this model; this model's apply"
echo "PASS"

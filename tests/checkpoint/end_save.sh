#!/usr/bin/env bash
# end_save.sh PROG MPIRUN [ARGS...]: a --checkpoint-dir given without --save-every keeps the
# trained model: a checkpoint of the last step is written at the end (it was written only on a
# signal, so a finished run left nothing in the directory it was given).
# 1. One rank: DIR/step-N of the last step, DIR/latest naming it, its weights those --dump-params
#    wrote after training (bitwise), and --resume auto from it has nothing left to train.
#    --resume auto alone (./checkpoints) continues a run there and saves its end as well.
# 2. Neither flag: nothing is written (./checkpoints is not made). A --checkpoint-dir that cannot
#    be written is refused at the start (with --resume it is a store to read: test_ckpt_disk_full).
# 3. Two ranks (MPIRUN not none), --checkpoint-dir given to rank 0 alone (it is rank 0's option):
#    the save at the end is every rank's (a collective), the run ends with the checkpoint written.
PROG=$1 MPIRUN=$2
shift 2
. "$(dirname "$0")/lib.sh"
A=(--train-limit 480 --test-limit 100 --batch-size 32 --epochs 1 --no-progress "$@")
steps=15 # 480 / 32

# 1. one rank
train 1 "${A[@]}" --checkpoint-dir D --dump-params W.bin
expect_rc 0
last=$(printf 'step-%08d' $steps)
expect_out "saved checkpoint D/$last (step $steps)"
[ -d "D/$last" ] || fail "no D/$last after a run given --checkpoint-dir D"
[ "$(ls D | grep -c '^step-')" -eq 1 ] || fail "D holds $(ls D | tr '\n' ' '), want $last alone"
[ "$(cat D/latest)" = "$last" ] || fail "D/latest is '$(cat D/latest)', want $last"
# model.safetensors' data (after the 8-byte length and the JSON header) is the weights --dump-params
# wrote, in the same order
python3 - "D/$last/model.safetensors" W.bin <<'EOF' || fail "D/$last/model.safetensors is not the trained weights"
import json, struct, sys
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
head = json.loads(raw[8:8 + n])
head.pop("__metadata__", None)
data = raw[8 + n:]
w = open(sys.argv[2], "rb").read()
parts = sorted(head.values(), key=lambda v: v["data_offsets"][0])
got = b"".join(data[v["data_offsets"][0]:v["data_offsets"][1]] for v in parts)
sys.exit(0 if got == w and len(w) > 0 else 1)
EOF
acc=$(sed -n 's/^epoch 1 .*test acc \([0-9.]*%\).*/\1/p' out)
[ -n "$acc" ] || fail "no epoch line"
train 1 "${A[@]}" --checkpoint-dir D --resume auto
expect_rc 0
expect_out "nothing to train (all 1 epoch done at step $steps)"
expect_out "test acc $acc"
[ "$(ls D | grep -c '^step-')" -eq 1 ] || fail "the resumed run with nothing to train saved again: $(ls D | tr '\n' ' ')"

# 1b. --resume auto (into ./checkpoints, the default) continues a run there: its end is saved too
mkdir cwd && cd cwd || exit 1
train 1 "${A[@]}" --max-steps 5 --save-every 5
expect_rc 0
train 1 "${A[@]}" --resume auto
expect_rc 0
expect_out "saved checkpoint checkpoints/$last (step $steps)"
[ "$(cat checkpoints/latest)" = "$last" ] || fail "--resume auto: checkpoints/latest is '$(cat checkpoints/latest)'"
cd "$tmp" || exit 1

# 2. neither flag: nothing on disk
mkdir none && (cd none && "$PROG" "${A[@]}" >../out 2>&1) || fail "a run without checkpoint flags failed"
[ -z "$(ls none)" ] || fail "a run without --checkpoint-dir or --save-every wrote $(ls none | tr '\n' ' ')"

# 2b. a --checkpoint-dir that cannot be made, without --resume: refused at the start, before training
touch F
train 1 "${A[@]}" --checkpoint-dir F/ck
expect_rc 1
expect_out "$NAME: --checkpoint-dir: I/O error: 'F/ck': cannot create the directory: Not a directory"
grep -q '^epoch 1' out && fail "the run trained before refusing its --checkpoint-dir"

# 3. two ranks, the flag on rank 0 alone
if [ "$MPIRUN" != none ]; then
    timeout 120 "$MPIRUN" --oversubscribe --bind-to none -np 1 "$PROG" "${A[@]}" --checkpoint-dir E : \
        -np 1 "$PROG" "${A[@]}" >out 2>&1
    rc=$?
    [ "$rc" -ne 124 ] || fail "2 ranks, --checkpoint-dir on rank 0 alone: hung at the end (killed after 120 s)"
    expect_rc 0
    [ "$(cat E/latest 2>/dev/null)" = "$(printf 'step-%08d' 8)" ] ||
        fail "2 ranks: E/latest is '$(cat E/latest 2>/dev/null)', want step-00000008 (480 / (32 x 2) rounded up)"
fi
echo "PASS"

#!/usr/bin/env bash
# resume_bitwise.sh PROG MPIRUN NP [ARGS...]: 40 steps straight equal, bit for bit (parameters and
# buffers, every step's loss, and the --metrics fields that do not depend on timing: loss,
# accuracy, lr, loss scale, skipped), 20 steps + a run killed in the middle of its next save
# (LOCKSTEP_CKPT_CRASH_AT) + resume to step 37 (crossing an epoch) + resume to 40. Global batch
# 32 (32/NP per rank), 32 steps an epoch; ARGS go to every run (the model, precision, ...). Then,
# with nothing left to train (--max-steps reached, --epochs 0), the checkpoint evaluates to the
# step-40 run's test figures and no checkpoint is written. The checkpoint records --no-decay-1d,
# --label-smoothing, --lr-schedule, --min-lr, --betas and --eps.
PROG=$1 MPIRUN=$2 NP=$3
shift 3
. "$(dirname "$0")/lib.sh"
A=(--train-limit 1000 --test-limit 200 --batch-size $((32 / NP)) --epochs 3 --no-progress --checkpoint-dir "$tmp/D"
   "$@")
# a metrics line without its timing and memory figures
deterministic() { sed -E 's/^(\{"step".*"lr": [^,]*), "step_ms".*("loss_scale": [^,]*, "skipped": [0-9]+).*/\1 \2/' "$1"; }

train "$NP" "${A[@]}" --max-steps 40 --log-steps A.log --metrics A.json --dump-params A.bin --save-every 40 \
    --checkpoint-dir "$tmp/S"
expect_rc 0
[ "$(wc -l <A.log)" -eq 40 ] || fail "straight run logged $(wc -l <A.log) steps, expected 40"

train "$NP" "${A[@]}" --max-steps 20 --save-every 20 --log-steps B.log --metrics B.json
expect_rc 0
expect_out "$NAME: saved checkpoint $tmp/D/step-00000020 (step 20)"
# --save-async: the line says that it was written in the background, and for how long training stopped
bg=
for a in "$@"; do [ "$a" = --save-async ] && bg=" in the background \(training stopped [0-9]+\.[0-9]{2} s\)"; done
grep -qE "^$NAME: saved checkpoint $tmp/D/step-00000020 \(step 20\): [0-9]+\.[0-9] MB in [0-9]+\.[0-9]{2} s$bg$" \
    "$tmp/out" || fail "the save's line does not give the checkpoint's size and time"
[ "$(cat D/latest)" = step-00000020 ] || fail "latest is '$(cat D/latest)'"

# Killed while saving step 25, after its manifest, before the directory rename: step 20 stays.
LOCKSTEP_CKPT_CRASH_AT=before-rename train "$NP" "${A[@]}" --resume auto --max-steps 25 --save-every 20 \
    --log-steps B.log --metrics B.json
[ "$rc" -ne 0 ] || fail "the run that was killed while saving exited 0"
expect_out "LOCKSTEP_CKPT_CRASH_AT=before-rename"
[ -d D/step-00000025.tmp ] && [ ! -e D/step-00000025 ] || fail "expected only the debris D/step-00000025.tmp"
[ "$(tail -n 1 B.log | cut -d' ' -f1)" = 25 ] || fail "B.log should end at step 25 before the resume"

train "$NP" "${A[@]}" --resume auto --max-steps 37 --save-every 20 --log-steps B.log --metrics B.json
expect_rc 0
expect_out "$NAME: resumed from $tmp/D/step-00000020 at step 20, epoch 1 (step 20 of 32 in the epoch)"
# the epoch's train figures are of the steps since the resume, or to --max-steps, and say so
expect_out "  (train figures of steps 21-32 of 32: resumed within the epoch)"
expect_out "  (train figures of steps 1-5 of 32: stopped at --max-steps)"
expect_out "$NAME: saved checkpoint $tmp/D/step-00000037 (step 37)"
[ ! -e D/step-00000025.tmp ] || fail "the next save did not remove D/step-00000025.tmp"

train "$NP" "${A[@]}" --resume auto --max-steps 40 --save-every 20 --log-steps B.log --metrics B.json \
    --dump-params B.bin
expect_rc 0
expect_out "  (train figures of steps 6-8 of 32: resumed within the epoch, stopped at --max-steps)"
expect_out "$NAME: resumed from $tmp/D/step-00000037 at step 37, epoch 2 (step 5 of 32 in the epoch)"
expect_out "$NAME: stopped at step 40 (--max-steps)"

# the test figures at step 40 (the last epoch line: --max-steps ends epoch 2 there)
figures() { grep -oE 'test loss [0-9.]+  test acc [0-9.]+%' "$1" | tail -n 1; }
at40=$(figures out)
[ -n "$at40" ] || fail "the last run printed no test figures"

cmp A.bin B.bin || fail "parameters after 40 steps differ between the straight and the resumed runs"
cmp A.log B.log || { diff A.log B.log | head; fail "per-step losses differ"; }
[ "$(wc -l <B.json)" -eq 40 ] || fail "B.json holds $(wc -l <B.json) steps, expected 40"
cmp <(deterministic A.json) <(deterministic B.json) ||
    { diff <(deterministic A.json) <(deterministic B.json) | head; fail "per-step metrics differ"; }
[ "$(ls -d D/step-* | wc -l)" -eq 3 ] || fail "--keep-last 3 left $(ls -d D/step-* | wc -l) checkpoints"
# the loss scaler's state, saved at step 40 after resumes, is the straight run's: its scale, growth
# tracker and (fp16) count of skipped steps, that of A.json's (the count was not saved: a resume
# restarted it at 0)
python3 - S/step-00000040/state.json D/step-00000040/state.json A.json <<'PY' || fail "the loss scaler's state differs"
import json, sys
a, b = (json.load(open(p))["loss_scaler"] for p in sys.argv[1:3])
if a != b:
    sys.exit(f"straight {a}, resumed {b}")
if "scale" in a:
    skipped = sum(json.loads(l)["skipped"] for l in open(sys.argv[3]))
    if a.get("skipped") != skipped:
        sys.exit(f"the checkpoints' skipped count {a.get('skipped')}, A.json's {skipped}")
    print(f"loss scaler at step 40, straight and resumed: {a}")
PY
# nothing left to train: the checkpoint is evaluated as it is, to the same figures, nothing saved
train "$NP" "${A[@]}" --resume auto --max-steps 40 --save-every 20
expect_rc 0
expect_out "$NAME: nothing to train (step 40 has reached --max-steps); the model as it is: $at40"
! grep -q "stopped at step" "$tmp/out" || fail "nothing trained, yet 'stopped at step' (said twice): $(cat "$tmp/out")"
! grep -q "^training time" "$tmp/out" || fail "nothing trained, yet a 'training time' (fashion_resnet said 0.0 s)"
train "$NP" "${A[@]}" --epochs 0 --resume "$tmp/D/step-00000040"
expect_rc 0
expect_out "$NAME: nothing to train (--epochs 0); the model as it is: $at40"
# (with nothing to train there is no schedule to have changed: it was said to)
! grep -q "learning-rate schedule changed" out || fail "--epochs 0 warned of a changed schedule: $(grep schedule out)"
# nor one to continue where another global batch moved its position ("its step 74 of 0")
train "$NP" "${A[@]}" --epochs 0 --resume "$tmp/D/step-00000037" --batch-size $((16 / NP))
expect_rc 0
expect_out "$NAME: resumed from $tmp/D/step-00000037 at step 37"
! grep -q "schedule continues" out || fail "--epochs 0 continued a schedule: $(grep schedule out)"
[ "$(cat D/latest)" = step-00000040 ] && [ "$(ls -d D/step-* | wc -l)" -eq 3 ] ||
    fail "a run with nothing to train changed the checkpoints: $(ls D)"
# a checkpoint at the end of the run's only epoch: resumed, it is done
train "$NP" "${A[@]}" --epochs 1 --save-every 100 --checkpoint-dir E
expect_rc 0
train "$NP" "${A[@]}" --epochs 1 --checkpoint-dir E --resume auto
expect_rc 0
expect_out "$NAME: resumed from E/step-00000032 at step 32, the end of epoch 1"
expect_out "$NAME: nothing to train (all 1 epoch done at step 32); the model as it is: test loss"
# the checkpoint records the optimizer's grouping (--no-decay-1d) and AdamW's --betas and --eps,
# the label smoothing (--label-smoothing) and the schedule (--lr-schedule, --min-lr); a resume
# without them says that they changed, naming each
nd=false sm=0 ls=cosine ml=0 betas= eps= B=() prev=
for a in "${A[@]}"; do
    [ "$prev" = --betas ] && betas=$a
    [ "$prev" = --eps ] && eps=$a
    if [ "$a" = --no-decay-1d ]; then nd=true
    elif [ "$a" = --label-smoothing ] || [ "$a" = --lr-schedule ] || [ "$a" = --min-lr ]; then :
    elif [ "$a" = --betas ] || [ "$a" = --eps ] || [ "$prev" = --betas ] || [ "$prev" = --eps ]; then :
    elif [ "$prev" = --label-smoothing ]; then sm=$a
    elif [ "$prev" = --lr-schedule ]; then ls=$a
    elif [ "$prev" = --min-lr ]; then ml=$a
    else B+=("$a"); fi
    prev=$a
done
python3 -c 'import json, sys; v = json.load(open(sys.argv[1]))["lr_schedule"]
sys.exit(v["decay"] != sys.argv[2] or abs(v["min_lr"] - float(sys.argv[3])) > 1e-7 * float(sys.argv[3]))' \
    D/step-00000040/state.json "$ls" "$ml" || fail "D/step-00000040/state.json does not record the $ls decay to $ml"
# --betas and --eps reach AdamW: the checkpoint records them
if [ -n "$betas$eps" ]; then
    python3 -c 'import json, sys; o = json.load(open(sys.argv[1]))["optimizer"]
b = [float(x) for x in sys.argv[2].split(",")] if sys.argv[2] else [0.9, 0.999]
e = float(sys.argv[3]) if sys.argv[3] else 1e-8
near = lambda x, y: abs(x - y) <= 1e-7 * y
sys.exit(not (near(o["beta1"], b[0]) and near(o["beta2"], b[1]) and near(o["eps"], e)))' \
        D/step-00000040/state.json "$betas" "$eps" || fail "state.json does not record --betas '$betas' --eps '$eps'"
fi
grep -qE "\"no_decay_1d\":[[:space:]]*$nd" D/step-00000040/state.json ||
    fail "D/step-00000040/state.json does not record no_decay_1d $nd"
python3 -c 'import json, sys; v = json.load(open(sys.argv[1]))["label_smoothing"]; sys.exit(v != float(sys.argv[2]))' \
    D/step-00000040/state.json "$sm" || fail "D/step-00000040/state.json does not record label_smoothing $sm"
if [ "$nd" = true ] || [ "$sm" != 0 ] || [ "$ls" != cosine ]; then
    train "$NP" "${B[@]}" --resume "$tmp/D/step-00000040" --max-steps 41 --checkpoint-dir F
    expect_rc 0
    if [ "$nd" = true ]; then # (and the changed AdamW figures, named: they were printed as equal)
        ch="no decay on 1-D on -> off"
        [ -z "$betas" ] || ch="$ch, beta2 ${betas#*,} -> 0.999"
        [ -z "$eps" ] || ch="$ch, eps $(printf '%g' "$eps") -> 1e-08"
        expect_out "optimizer settings changed since the checkpoint ($ch); this run's apply"
    fi
    [ "$sm" = 0 ] || expect_out "label smoothing changed since the checkpoint: saved $sm, now 0"
    [ "$ls" = cosine ] || expect_out "learning-rate schedule changed since the checkpoint (saved $ls base"
    [ "$ls" = cosine ] || expect_out "changed: kind $ls -> cosine"
    [ "$ls" = cosine ] || expect_out "); this run's applies"
fi
# fp16: a loss scaler's state that is not one is refused, naming state.json (a growth tracker of 2.5
# was truncated), and one that is missing starts the scaler afresh, said so (it was silent)
if [[ " ${A[*]} " == *" --precision fp16 "* ]]; then
    edit_state() { # DIR PYTHON: s (state.json's object) edited, the manifest's size and CRC32 with it
        python3 - "$1" "$2" <<'EOF'
import json, sys, zlib
d, code = sys.argv[1], sys.argv[2]
s = json.load(open(d + "/state.json"))
exec(code)
raw = json.dumps(s).encode()
open(d + "/state.json", "wb").write(raw)
m = json.load(open(d + "/manifest.json"))
for f in m["files"]:
    if f["name"] == "state.json":
        f["size"], f["crc32"] = len(raw), zlib.crc32(raw)
open(d + "/manifest.json", "w").write(json.dumps(m))
EOF
    }
    # a checkpoint from before the count of skipped steps was saved resumes, the count from 0
    for edit in 's["loss_scaler"]["growth_tracker"] = 2.5' 's["loss_scaler"] = {}' 'del s["loss_scaler"]["skipped"]'; do
        rm -rf E && mkdir E && cp -r D/step-00000040 E/ && edit_state E/step-00000040 "$edit"
        train "$NP" "${A[@]}" --resume "$tmp/E/step-00000040" --max-steps 41 --checkpoint-dir E
        if [ "$edit" = 's["loss_scaler"] = {}' ]; then
            expect_rc 0
            expect_out "'$tmp/E/step-00000040' holds no loss scale (written without fp16): the scaler starts at 65536"
        elif [ "$edit" = 'del s["loss_scaler"]["skipped"]' ]; then
            expect_rc 0
            expect_out "resumed from $tmp/E/step-00000040 at step 40"
            w=$(grep warn "$tmp/out" | grep -v "no usable CUDA device") # (a CUDA build on a machine without a GPU)
            [ -z "$w" ] || fail "a checkpoint without the skipped count: $w"
            train "$NP" "${A[@]}" --resume "$tmp/E/step-00000040" --max-steps 41 --checkpoint-dir E --save-every 41
            expect_rc 0
            python3 -c 'import json, sys; l = json.load(open(sys.argv[1]))["loss_scaler"]; sys.exit(l["skipped"] != 0 and str(l))' \
                E/step-00000041/state.json || fail "the skipped count of a checkpoint without one did not start at 0"
        else
            expect_rc 1
            expect_out "'$tmp/E/step-00000040/state.json': loss_scaler \"growth_tracker\" = 2.5 is not a whole number from 0 to 2^53"
        fi
    done
fi
echo "PASS: $NP rank(s): 20 + crash + 17 + 3 steps equal 40 straight, bit for bit ($(wc -c <A.bin) parameter" \
     "bytes, 40 losses and metrics); the step-40 checkpoint evaluates to $at40"

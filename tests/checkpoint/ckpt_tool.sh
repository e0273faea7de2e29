#!/usr/bin/env bash
# ckpt_tool.sh PROG TOOL [RESNET]: lockstep-ckpt on checkpoints fashion_mlp (and fashion_resnet) wrote (steps 8 and 16, AdamW,
# an EMA, dropout): verify passes both; info summarizes the newest (step, ranks and batch,
# optimizer, model, files and their tensors); tensors lists model.safetensors' tensors with dtype,
# shape and bytes; diff tells a rerun (identical), the run with accumulation steps (within 1e-5)
# and another seed (far) apart. A flipped byte in step 16's optimizer.safetensors: verify fails
# (exit 1) naming the file and the CRC, step 8 still verifies, info falls back to step 8; a
# step-N.tmp left by an interrupted save is noted; a truncated file is named as truncated; bad
# usage exits 2; a missing path exits 1.
PROG=$1 TOOL=$2 RESNET=${3:-} MPIRUN=none
. "$(dirname "$0")/lib.sh"
export LOCKSTEP_DEVICE=cpu
run() { # WANT_RC ARGS...: run the tool, its output into $tmp/out
    local want=$1
    shift
    "$TOOL" "$@" >"$tmp/out" 2>&1
    rc=$?
    [ "$rc" -eq "$want" ] || fail "lockstep-ckpt $*: exit $rc, expected $want"
}
usage_err() { # WHAT ARGS...: exit 2, "lockstep-ckpt: WHAT" and the pointer to --help, nothing else
    local what=$1
    shift
    run 2 "$@"
    printf 'lockstep-ckpt: %s\nrun lockstep-ckpt --help for the usage\n' "$what" | cmp -s - "$tmp/out" ||
        fail "lockstep-ckpt $*: expected only 'lockstep-ckpt: $what' and the pointer to --help"
}
train 1 --train-limit 1024 --test-limit 200 --epochs 1 --batch-size 64 --max-steps 16 --save-every 8 \
    --checkpoint-dir C --optimizer adamw --ema 0.99 --dropout 0.1 --no-progress
expect_rc 0

run 0 verify C
expect_out "ok       C/step-00000008 (step 8)"
expect_out "ok       C/step-00000016 (step 16)"
run 0 info C
expect_out "checkpoint  C/step-00000016 (verified: every file's size and CRC32, state.json read, the tensors against it)"
expect_out "step        16 (optimizer steps 16); the end of epoch 1, 16 steps an epoch"
expect_out "layers      Linear, ReLU, Dropout(p=0.1), Linear, ReLU, Dropout(p=0.1), Linear"
expect_out "ranks       1 x batch 64 x 1 accumulation = 64 samples a step; seed 42"
expect_out "optimizer   adamw: lr 0.001"
# 16 steps in all, within the 100 of warmup: the kind given, and that it never decays (it said
# cosine alone, then "constant", which the run was not given)
expect_out "schedule    cosine: base lr 0.001, min lr 0, 100 warmup steps of 16 (no steps past the warmup: no decay)"
expect_out "model       dropout 0.1, label smoothing 0, EMA of the weights (decay 0.99, 16 updates)"
grep -qE "^file +model.safetensors +[0-9]+ bytes, 6 tensors, 535818 values$" "$tmp/out" || fail "info: no model line"
grep -qE "^file +optimizer.safetensors +[0-9]+ bytes, 12 tensors, 1071636 values$" "$tmp/out" ||
    fail "info: no optimizer line"
# the settings a checkpoint records beyond its fields: info lists them, a resume that changes one
# says so (--precision, --clip-grad-norm, the data: they were taken silently)
expect_out "settings    --clip-grad-norm 0, --precision fp32, --sampler pad, the training set's size (--train-limit, --data-dir) 1024, the training set's CRC32 (its files in --data-dir) "
train 1 --train-limit 1000 --test-limit 200 --epochs 1 --batch-size 64 --max-steps 16 --checkpoint-dir C \
    --optimizer adamw --ema 0.99 --dropout 0.1 --no-progress --precision bf16 --clip-grad-norm 2 --resume auto
expect_rc 0
expect_out "--precision changed since the checkpoint: saved fp32, now bf16; this run's applies"
expect_out "--clip-grad-norm changed since the checkpoint: saved 0, now 2; this run's applies"
expect_out "the training set's size (--train-limit, --data-dir) changed since the checkpoint: saved 1024, now 1000"
expect_out "the training set's CRC32 (its files in --data-dir) changed since the checkpoint: saved "
# epochs counted from 1, as the programs print them (it said "epoch 0, 512 samples of it done")
run 0 info C/step-00000008
expect_out "step        8 (optimizer steps 8); epoch 1, 512 samples of it done, 16 steps an epoch"
run 0 tensors C/step-00000016/model.safetensors
grep -qE "^0.weight +F32 +\[512, 784\] +1605632 bytes$" "$tmp/out" || fail "tensors: no 0.weight line"
expect_out "6 tensors, 535818 values, 2143272 bytes of data"

# diff: the same run again is identical; 32 x 2 accumulation steps instead of 64 agrees within
# rounding (the masks are keyed to the samples); another seed is far; files of different tensors
# cannot be compared
T=(--train-limit 1024 --test-limit 200 --epochs 1 --max-steps 16 --save-every 16 --optimizer adamw --ema 0.99
   --dropout 0.1 --no-progress)
train 1 "${T[@]}" --batch-size 64 --checkpoint-dir R
expect_rc 0
train 1 "${T[@]}" --batch-size 32 --accum-steps 2 --checkpoint-dir A
expect_rc 0
train 1 "${T[@]}" --batch-size 64 --seed 7 --checkpoint-dir S
expect_rc 0
run 0 diff C/step-00000016 R/step-00000016
expect_out "identical: 24 tensors, bit for bit"
run 1 diff R/step-00000016 A/step-00000016
grep -qE "^[0-9]+ of 24 tensors differ; the largest difference is [0-9.e-]+ of its tensor's largest value \(tolerance 0: bit for bit\)$" \
    "$tmp/out" || fail "diff: no summary of the accumulation run's differences"
grep -qE "^model.safetensors: 0.weight +max \|a - b\| [0-9.e-]+ at element [0-9]+: [0-9.e-]+ of the largest \|a\|, \|b\|" "$tmp/out" ||
    fail "diff: no line for 0.weight"
run 0 diff R/step-00000016 A/step-00000016 --tolerance 1e-5
grep -qE "^[0-9]+ of 24 tensors differ; .* \(tolerance 1e-05: all within it\)$" "$tmp/out" ||
    fail "diff --tolerance 1e-5: the summary does not say all are within it"
run 1 diff R/step-00000016/model.safetensors S/step-00000016/model.safetensors --tolerance 1e-5
grep -qE "\(tolerance 1e-05: over it\)$" "$tmp/out" || fail "diff --tolerance 1e-5: the summary does not say over it"
run 2 diff R/step-00000016/model.safetensors R/step-00000016/optimizer.safetensors
expect_out "only in R/step-00000016/optimizer.safetensors: 0.weight.exp_avg"
run 2 diff R/step-00000016 R/step-00000016/model.safetensors
expect_out "are not both checkpoints or both files"
usage_err "diff: --tolerance '-1': expected a number >= 0" diff R S --tolerance -1
run 2 diff R/step-00000016 R/step-00000099
expect_out "lockstep-ckpt: diff: 'R/step-00000099': No such file or directory"
# --tolerance before the paths too (it took them for the tolerance)
run 0 diff --tolerance 1e-5 R/step-00000016 A/step-00000016
# each file of a checkpoint summed up on a line, the EMA's too (its tensors are named as the model's:
# a difference in it was told from the model's by nothing, and one without an EMA against one with
# it said only "ema.safetensors: only in"); the same lines whichever is A
T0=(--train-limit 1024 --test-limit 200 --epochs 1 --max-steps 16 --save-every 16 --optimizer adamw --dropout 0.1
    --no-progress --batch-size 64)
train 1 "${T0[@]}" --checkpoint-dir NE
expect_rc 0
train 1 "${T0[@]}" --ema 0.9 --checkpoint-dir EE
expect_rc 0
for ab in "R NE" "NE R"; do
    set -- $ab
    run 2 diff $1/step-00000016 $2/step-00000016
    printf '%s\n' "model.safetensors: identical: 6 tensors, bit for bit" \
        "optimizer.safetensors: identical: 12 tensors, bit for bit" \
        "ema.safetensors: only in R/step-00000016 (an EMA of the weights, --ema, in one checkpoint only)" |
        diff - "$tmp/out" || fail "diff $ab: not the expected report"
done
run 1 diff R/step-00000016 EE/step-00000016
cp "$tmp/out" "$tmp/out.re"
grep -v "^ema.safetensors: [0-9]" "$tmp/out" | grep -qv "^ema.safetensors: \|^model.safetensors: identical\|^optimizer.safetensors: identical\|^6 of 24 tensors differ" &&
    fail "diff R EE: a line other than the EMA's"
grep -qE "^ema.safetensors: 0.weight +max \|a - b\| " "$tmp/out" || fail "diff R EE: no line for the EMA's 0.weight"
grep -qE "^ema.safetensors: 6 of 6 tensors differ; the largest difference is [0-9.e-]+ of its tensor's largest value$" \
    "$tmp/out" || fail "diff R EE: no summary of ema.safetensors"
expect_out "model.safetensors: identical: 6 tensors, bit for bit"
run 1 diff EE/step-00000016 R/step-00000016
diff "$tmp/out.re" "$tmp/out" || fail "diff EE R: not diff R EE's report"
# a damaged checkpoint is said so, not compared: one bit flipped in the last value's lowest byte
# passed --tolerance 1e-5 as a difference of training (exit status 0)
cp -r R Rd
python3 - Rd/step-00000016/optimizer.safetensors <<'PY'
import sys
b = bytearray(open(sys.argv[1], "rb").read())
b[-4] ^= 1
open(sys.argv[1], "wb").write(b)
PY
run 1 diff R/step-00000016 Rd/step-00000016 --tolerance 1e-5
expect_out "lockstep-ckpt: diff: 'Rd/step-00000016' is damaged: 'Rd/step-00000016/optimizer.safetensors': CRC32"
grep -q "tensors differ" "$tmp/out" && fail "diff: a damaged checkpoint compared"
run 0 diff R/step-00000016/optimizer.safetensors Rd/step-00000016/optimizer.safetensors --tolerance 1e-5
# bitwise by default: -0 against 0 differs (it printed "1 of 1 tensors differ" and exited 0); a NaN
# against a number is said so (it was "max |a - b| inf")
python3 - <<'PY'
import json, struct
def write(path, vals):
    b = struct.pack("<%df" % len(vals), *vals)
    h = json.dumps({"x": {"dtype": "F32", "shape": [len(vals)], "data_offsets": [0, len(b)]}}).encode()
    h += b" " * (-len(h) % 8)
    open(path, "wb").write(struct.pack("<Q", len(h)) + h + b)
write("z.st", [0.0, 1.0, 2.0])
write("nz.st", [-0.0, 1.0, 2.0])
write("nan.st", [0.0, float("nan"), 2.0])
PY
run 1 diff z.st nz.st
expect_out "equal values in other bits (-0 against 0, or NaNs' payloads)"
expect_out "1 of 1 tensors differ; the largest difference is 0 of its tensor's largest value (tolerance 0: bit for bit)"
run 0 diff z.st nz.st --tolerance 1e-9
run 1 diff z.st nan.st --tolerance 1
expect_out "NaN in one and not the other, first at element 1"
# --tolerance=X, as getopt_long takes it, and "--" before a path starting with '-' (the first was
# taken for a path: "--tolerance=1e-9 z.st nz.st" said "'nz.st' is a third"); another option is
# named as one
run 0 diff --tolerance=1e-9 z.st nz.st
run 0 diff z.st nz.st --tolerance=1e-9
cp nz.st ./-nz.st
run 0 diff --tolerance 1e-9 z.st -- -nz.st
usage_err "diff: --tolerance '': expected a number >= 0" diff z.st nz.st --tolerance=
usage_err "diff: --tolerance given twice" diff --tolerance=1 z.st nz.st --tolerance 2
usage_err "diff: unknown option '-t' (diff takes --tolerance X; a path starting with '-': after --)" \
    diff -t 1e-5 z.st nz.st
# a tensor of another dtype or shape: which, in each file (it said "dtype or shape differ")
python3 - <<'PY'
import json, struct
b = struct.pack("<3e", 0.0, 1.0, 2.0)
h = json.dumps({"x": {"dtype": "F16", "shape": [3, 1], "data_offsets": [0, len(b)]}}).encode()
h += b" " * (-len(h) % 8)
open("h.st", "wb").write(struct.pack("<Q", len(h)) + h + b)
PY
run 2 diff z.st h.st
expect_out "x: not comparable: F32 [3] in z.st, F16 [3, 1] in h.st"
# diff A B and diff B A report the same (sides swapped): the tensors in one order (by name, numbers
# as numbers), each difference relative to the larger of the two tensors' largest values (it was
# a's alone: 0.333 one way and 0.25 the other, so --tolerance 0.3 passed B A and failed A B)
python3 - <<'PY'
import json, struct
def write(path, tensors):
    out, blob = {}, b""
    for k, (dt, sh, vals) in tensors.items():
        b = struct.pack("<%d%s" % (len(vals), {"F32": "f", "F16": "e"}[dt]), *vals)
        out[k] = {"dtype": dt, "shape": sh, "data_offsets": [len(blob), len(blob) + len(b)]}
        blob += b
    h = json.dumps(out).encode()
    h += b" " * (-len(h) % 8)
    open(path, "wb").write(struct.pack("<Q", len(h)) + h + blob)
write("sa.st", {"10.w": ("F32", [3], [1, 2, 3]), "onlyA": ("F32", [1], [1]), "s": ("F32", [2], [1, 2]),
                "2.w": ("F32", [2], [1, 100])})
write("sb.st", {"2.w": ("F32", [2], [1, 200]), "s": ("F16", [2], [1, 2]), "10.w": ("F32", [3], [1, 2, 4]),
                "onlyB": ("F32", [1], [1])})
write("sc.st", {"10.w": ("F32", [3], [1, 2, 3]), "2.w": ("F32", [2], [1, 100])})
write("sd.st", {"2.w": ("F32", [2], [1, 200]), "10.w": ("F32", [3], [1, 2, 4])})
PY
sym_ab='2.w                                      max |a - b| 100 at element 1: 0.5 of the largest |a|, |b| (200)
10.w                                     max |a - b| 1 at element 2: 0.25 of the largest |a|, |b| (4)'
run 2 diff sa.st sb.st
printf '%s\n' "$sym_ab" "only in sa.st: onlyA" "only in sb.st: onlyB" "s: not comparable: F32 [2] in sa.st, F16 [2] in sb.st" |
    diff - "$tmp/out" || fail "diff sa.st sb.st: not the expected report"
run 2 diff sb.st sa.st
printf '%s\n' "$sym_ab" "only in sa.st: onlyA" "only in sb.st: onlyB" "s: not comparable: F16 [2] in sb.st, F32 [2] in sa.st" |
    diff - "$tmp/out" || fail "diff sb.st sa.st: not diff sa.st sb.st's report with the sides swapped"
for ab in "sc.st sd.st" "sd.st sc.st"; do
    run 1 diff $ab --tolerance 0.4
    printf '%s\n' "$sym_ab" "2 of 2 tensors differ; the largest difference is 0.5 of its tensor's largest value (tolerance 0.4: over it)" |
        diff - "$tmp/out" || fail "diff $ab --tolerance 0.4: not the expected report"
    run 0 diff $ab --tolerance 0.6
done

# damage: a flipped byte, then a truncated file
printf 'X' | dd of=C/step-00000016/optimizer.safetensors bs=1 seek=5000 conv=notrunc 2>/dev/null
run 1 verify C
expect_out "ok       C/step-00000008 (step 8)"
grep -qE "^DAMAGED  C/step-00000016: 'C/step-00000016/optimizer.safetensors': CRC32 [0-9a-f]{8} does not match the manifest's [0-9a-f]{8} \(the file is damaged\)$" "$tmp/out" ||
    fail "verify: the damaged file is not named"
run 0 verify C/step-00000008
mkdir C/step-00000024.tmp
run 1 verify C
expect_out "note     C/step-00000024.tmp: a save in progress, or left by an interrupted one: not a checkpoint (the next save removes it)"
run 0 info C
expect_out "skipping damaged checkpoint 'C/step-00000016'"
expect_out "checkpoint  C/step-00000008"
truncate -s 1000 C/step-00000008/model.safetensors
run 1 verify C/step-00000008
expect_out "'C/step-00000008/model.safetensors': 1000 bytes but the manifest records"
expect_out "(truncated)"
run 1 info C
expect_out "no valid checkpoint in 'C' (2 damaged"

# bad usage: one line saying what is wrong and where the usage is (the whole help was printed,
# without a word of what was wrong)
usage_err "no command given (verify, info, tensors or diff)"
usage_err "verify: no PATH given" verify
usage_err "unknown command 'frob' (verify, info, tensors or diff)" frob C
usage_err "unknown option '--frob'" --frob
usage_err "info: expected one PATH, got 2" info a b
usage_err "tensors: expected one FILE, got 0" tensors
usage_err "diff: --tolerance needs a value (a number >= 0)" diff A B --tolerance
usage_err "diff: expected two paths, A and B, but 'C' is a third" diff A B C
run 0 --version
grep -qxE "lockstep-ckpt [0-9]+\.[0-9]+\.[0-9]+" "$tmp/out" || fail "--version: $(cat "$tmp/out")"
run 1 verify /nonexistent
expect_out "MISSING  /nonexistent: No such file or directory"
# a directory with no checkpoint in it (--save-every's before its first save: only its .lock)
# holds nothing damaged: it said DAMAGED
mkdir E
: >E/.lock
run 1 verify E
expect_out "NONE     E: no checkpoint in it (no manifest.json, no step-N directory); --resume auto starts afresh there"
# a file is not "no such directory"; a file named as a checkpoint is not one (a resume ignores it)
run 1 verify z.st
expect_out "DAMAGED  z.st: not a directory (a checkpoint is a step-N directory)"
run 1 info z.st
expect_out "lockstep-ckpt: 'z.st': not a directory (a checkpoint, or a directory of them; for a safetensors file, lockstep-ckpt tensors)"
mkdir F
cp -r R/step-00000016 F/
: >F/step-00000099
ln -s /nonexistent/step-00000120 F/step-00000120
run 0 verify F
expect_out "note     F/step-00000099: not a directory: not a checkpoint (a resume skips it)"
expect_out "note     F/step-00000120: a symbolic link to nothing that exists: not a checkpoint (a resume skips it)"
expect_out "ok       F/step-00000016 (step 16)"
# info and a resume (the same search) say what they passed over: it was silent, so a newest step
# on a lost mount gave an older checkpoint without a word
run 0 info F
expect_out "skipping 'F/step-00000120': a symbolic link to nothing that exists (not a checkpoint)"
expect_out "skipping 'F/step-00000099': not a directory (not a checkpoint)"
expect_out "checkpoint  F/step-00000016"
# a checkpoint under another step's name is damaged with a trailing slash too (the name was taken
# as "" after the slash, unchecked: "ok"); a directory given as "F/" joins as "F/step-N" ("F//")
mkdir G
cp -r R/step-00000016 G/step-00000017
# paths are printed with their slashes normalized ("G/step-00000017/" gave
# 'G/step-00000017//manifest.json', "F//" "F//step-00000016")
run 1 verify G/step-00000017/
expect_out "DAMAGED  G/step-00000017: 'G/step-00000017/manifest.json': the manifest says step 16 but the directory is named step-00000017"
run 1 verify G/
expect_out "DAMAGED  G/step-00000017: "
run 0 verify F/ F//
expect_out "ok       F/step-00000016 (step 16)"
expect_out "note     F/step-00000099: not a directory"
! grep -q "//" "$tmp/out" || fail "verify F/ F//: a doubled slash printed: $(grep "//" "$tmp/out")"
run 0 info F//
expect_out "checkpoint  F/step-00000016 (verified"
run 0 diff F//step-00000016/ R/step-00000016//
# a run given --checkpoint-dir with a slash at its end: its saves, its resume, its warnings
# ("saved checkpoint SL//step-00000004", "resumed from SL//step-00000004")
W=(--train-limit 512 --test-limit 100 --epochs 1 --batch-size 64 --hidden 16 --save-every 4 --no-progress)
train 1 "${W[@]}" --checkpoint-dir SL/ --max-steps 4
expect_rc 0
expect_out "saved checkpoint SL/step-00000004 (step 4)"
train 1 "${W[@]}" --checkpoint-dir SL// --resume SL//step-00000004/ --max-steps 8
expect_rc 0
expect_out "resumed from SL/step-00000004 at step 4"
expect_out "saved checkpoint SL/step-00000008 (step 8)"
train 1 "${W[@]}" --checkpoint-dir SL/ --resume auto --max-steps 8
expect_rc 0
expect_out "resumed from SL/step-00000008 at step 8"
! grep -q "//" "$tmp/out" || fail "--checkpoint-dir SL/: a doubled slash printed: $(grep "//" "$tmp/out")"
# a step-N a resume never takes (N past int64) is not verified as a checkpoint (it said "ok")
mkdir H
cp -r R/step-00000016 H/step-99999999999999999999999
run 1 verify H
expect_out "note     H/step-99999999999999999999999: a step number or name too long for a checkpoint: not one (a resume skips it)"
expect_out "NONE     H: no checkpoint in it"
# and named itself (verify, info, diff, --resume PATH): refused naming the directory, not "ok" of step 16
run 1 verify H/step-99999999999999999999999
expect_out "DAMAGED  H/step-99999999999999999999999: 'H/step-99999999999999999999999/manifest.json': the directory is named step-99999999999999999999999, a step number past int64 (the manifest says step 16): not a checkpoint's name"
run 1 verify H/step-99999999999999999999999/
expect_out "a step number past int64 (the manifest says step 16)"
run 1 info H/step-99999999999999999999999
expect_out "lockstep-ckpt: 'H/step-99999999999999999999999/manifest.json': the directory is named step-99999999999999999999999, a step number past int64"
run 1 diff H/step-99999999999999999999999 R/step-00000016
expect_out "lockstep-ckpt: diff: 'H/step-99999999999999999999999' is damaged: "
# DIR/latest, the file naming the newest checkpoint, is that checkpoint (verify said "DAMAGED: not
# a directory", diff read it as a safetensors file: "header length 3472328284420011123 exceeds ...")
run 0 verify R/latest
expect_out "note     R/latest names the newest checkpoint, R/step-00000016"
expect_out "ok       R/step-00000016 (step 16)"
run 0 info R/latest
expect_out "checkpoint  R/step-00000016 (verified"
run 0 diff R/latest R/step-00000016
expect_out "identical: 24 tensors, bit for bit"
mkdir empty
run 1 info empty
expect_out "'empty' holds no checkpoint"
run 1 tensors C/step-00000008/state.json
expect_out "'C/step-00000008/state.json' is not a safetensors file but text (JSON?)"
run 0 --help
expect_out "usage: lockstep-ckpt verify PATH..."
# a subcommand's --help is the help, not a path named --help (exit 1)
run 0 info --help
expect_out "usage: lockstep-ckpt verify PATH..."
run 0 verify -h
# a report that cannot be written is an error, not exit 0
"$TOOL" info R >/dev/full 2>"$tmp/out"
rc=$?
expect_rc 1
expect_out "lockstep-ckpt: cannot write the output: No space left on device"
"$TOOL" verify R >&- 2>"$tmp/out"
rc=$?
expect_rc 1
# a FIFO is refused, not opened and waited on forever
mkfifo fifo
timeout 20 "$TOOL" tensors fifo >"$tmp/out" 2>&1
rc=$?
expect_rc 1
expect_out "'fifo': not a regular file"
# a run's directory for diff: which checkpoint is not for diff to guess (it said "hold no
# safetensors files")
run 2 diff R S
expect_out "lockstep-ckpt: diff: 'R' is a directory of checkpoints: give one of them (R/step-N)"
# a tensor's name is printed with its control bytes escaped (a newline faked a line)
python3 - <<'PY'
import json, struct
b = struct.pack("<f", 1.0)
h = json.dumps({"a\nb\u001b[31m": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}).encode()
h += b" " * (-len(h) % 8)
open("ctrl.st", "wb").write(struct.pack("<Q", len(h)) + h + b)
PY
run 0 tensors ctrl.st
grep -qF 'a\x0ab\x1b[31m' "$tmp/out" || fail "tensors: the name's control bytes not escaped"
# and in an error (they reached the terminal raw there)
python3 - <<'PY'
import json, struct
h = json.dumps({"\u001b]0;x\u0007\u001b[2J": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}}).encode()
h += b" " * (-len(h) % 8)
open("ctrl_bad.st", "wb").write(struct.pack("<Q", len(h)) + h + bytes(4))
PY
run 1 tensors ctrl_bad.st
expect_out "lockstep-ckpt: 'ctrl_bad.st': tensor '\x1b]0;x\x07\x1b[2J': shape [2] of F32 needs 8 bytes but data_offsets [0, 4] span 4"
! grep -q $'\x1b' "$tmp/out" || fail "tensors: a name's escape sequence reached the terminal in an error"

# what a resume reads besides the bytes the manifest vouches for (verify said "ok" to both): a
# state.json of another format version, a safetensors header that is not JSON, their manifests
# rewritten to match
fixman() { # DIR: the manifest's sizes and CRCs recomputed
    python3 - "$1" <<'PY'
import json, os, sys, zlib
d = sys.argv[1]
m = json.load(open(d + "/manifest.json"))
for f in m["files"]:
    b = open(os.path.join(d, f["name"]), "rb").read()
    f["size"], f["crc32"] = len(b), zlib.crc32(b)
json.dump(m, open(d + "/manifest.json", "w"))
PY
}
V=(--train-limit 1024 --test-limit 200 --epochs 1 --batch-size 64 --max-steps 16 --save-every 8 --no-progress)
train 1 "${V[@]}" --checkpoint-dir V
expect_rc 0
sed -i 's/"version":[[:space:]]*1/"version": 2/' V/step-00000016/state.json
fixman V/step-00000016
run 1 verify V
expect_out "NEWER FORMAT  V/step-00000016: 'V/step-00000016/state.json': state version 2 is not 1, the only one this build reads"
expect_out "ok       V/step-00000008 (step 8)"
# info says what to do in its own words (it advised --resume PATH, a training program's flag)
run 1 info V
expect_out "lockstep-ckpt: 'V/step-00000016/state.json': state version 2 is not 1, the only one this build reads (not falling back to an older checkpoint: name one, V/step-N, to use it)"
# a newer format is not skipped for an older checkpoint: that would silently lose its steps
train 1 "${V[@]}" --checkpoint-dir V --resume auto
expect_rc 1
expect_out "state version 2 is not 1, the only one this build reads (not resuming from an older checkpoint: give one with --resume PATH to do so)"
cp V/step-00000008/state.json V/step-00000016/state.json
sed -i 's/"step":[[:space:]]*8,/"step": 16,/' V/step-00000016/state.json
python3 -c "
p = 'V/step-00000016/model.safetensors'
b = bytearray(open(p, 'rb').read()); b[8] = ord('['); open(p, 'wb').write(b)"
fixman V/step-00000016
run 1 verify V/step-00000016
expect_out "V/step-00000016/model.safetensors"
# damaged: skipped with a warning, the older one resumed (it stopped the run)
train 1 "${V[@]}" --checkpoint-dir V --resume auto --max-steps 9
expect_rc 0
expect_out "skipping damaged checkpoint 'V/step-00000016'"
expect_out "resumed from V/step-00000008 at step 8"

# state.json naming another optimizer than the one whose states optimizer.safetensors holds: the
# resume refused it ("this run's is ..."), verify said ok
mkdir -p K && cp -r V/step-00000008 K/
kind=$(grep -o '"kind":[[:space:]]*"[a-z]*"' K/step-00000008/state.json | grep -o '"[a-z]*"$' | tr -d '"')
other=$([ "$kind" = sgd ] && echo adamw || echo sgd)
sed -i "s/\"kind\":[[:space:]]*\"$kind\"/\"kind\": \"$other\"/" K/step-00000008/state.json
fixman K/step-00000008
run 1 verify K
expect_out "DAMAGED  K/step-00000008: 'K/step-00000008/optimizer.safetensors' holds the state of $kind but state.json names the optimizer $other"

# state.json's values out of range, its manifest rewritten to match: a negative learning rate, a
# loss scale of -1, a sampler position past the epoch's data (verify said ok, a resume took them), a
# negative step (it said "missing or not an integer"): refused naming the file, field and value
for case in 'lr_schedule "base_lr" = -0.5 is not finite and >= 0' 'loss_scaler "scale" = -1 is not a number > 0' \
    "\"epoch_samples\" = 1088 is past the epoch's data: 16 steps of 1 ranks x batch 64 x 1 accumulation steps are 1024 samples" \
    '"step" = -8 is not an integer from 0 to 2^53'; do
    rm -rf RG && mkdir RG && cp -r V/step-00000008 RG/
    python3 - RG/step-00000008/state.json "$case" <<'PY'
import json, sys
p, case = sys.argv[1:3]
st = json.load(open(p))
if "base_lr" in case: st["lr_schedule"]["base_lr"] = -0.5
if "scale" in case: st["loss_scaler"] = {"scale": -1, "growth_tracker": 0}
if "epoch_samples" in case: st["epoch_samples"] = 1088
if '"step"' in case: st["step"] = -8
json.dump(st, open(p, "w"))
PY
    fixman RG/step-00000008
    run 1 verify RG
    expect_out "DAMAGED  RG/step-00000008: 'RG/step-00000008/state.json': $case"
    train 1 "${V[@]}" --checkpoint-dir RG --resume RG/step-00000008
    expect_rc 1
    expect_out "'RG/step-00000008/state.json': $case"
done

# the tensors against what state.json records, their manifests rewritten to match (verify said ok
# to each, the resume refused it, and --resume auto stopped there rather than skipping to an older
# checkpoint): a parameter missing from model.safetensors, one transposed, a momentum missing from
# optimizer.safetensors, a tensor more in ema.safetensors
st_edit() { # FILE PYTHON: FILE rewritten, PYTHON changing sd (name -> [dtype, shape, bytes])
    python3 - "$1" "$2" <<'PY'
import json, struct, sys
path, code = sys.argv[1:3]
b = open(path, "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
meta, data = h.pop("__metadata__", None), b[8 + n:]
sd = {k: [v["dtype"], v["shape"], data[v["data_offsets"][0]:v["data_offsets"][1]]] for k, v in h.items()}
exec(code)
out, off, blob = ({"__metadata__": meta} if meta else {}), 0, b""
for k, (dt, sh, by) in sd.items():
    out[k] = {"dtype": dt, "shape": sh, "data_offsets": [off, off + len(by)]}
    off, blob = off + len(by), blob + by
hb = json.dumps(out).encode()
hb += b" " * (-len(hb) % 8)
open(path, "wb").write(struct.pack("<Q", len(hb)) + hb + blob)
PY
}
mkdir -p T1 T2 T3 T4
cp -r V/step-00000008 T1/ && st_edit T1/step-00000008/model.safetensors 'del sd["4.bias"]'
cp -r V/step-00000008 T2/ # and as step 16, transposed: the older one to fall back to
cp -r V/step-00000008 T2/step-00000016 && st_edit T2/step-00000016/model.safetensors 'sd["4.weight"][1] = [256, 10]'
sed -i 's/"step":[[:space:]]*8,/"step": 16,/' T2/step-00000016/state.json T2/step-00000016/manifest.json
cp -r V/step-00000008 T3/ && st_edit T3/step-00000008/optimizer.safetensors 'del sd["2.bias.momentum"]'
cp -r R/step-00000016 T4/ && st_edit T4/step-00000016/ema.safetensors 'sd["extra\x1b[2J"] = ["F32", [1], bytes(4)]'
for d in T1/step-00000008 T2/step-00000016 T3/step-00000008 T4/step-00000016; do fixman $d; done
run 1 verify T1 T2 T3 T4
expect_out "DAMAGED  T1/step-00000008: 'T1/step-00000008/model.safetensors': tensor '4.bias' of state.json's model is missing"
expect_out "ok       T2/step-00000008 (step 8)"
expect_out "DAMAGED  T2/step-00000016: 'T2/step-00000016/model.safetensors': tensor '4.weight' is [256, 10] F32 but state.json's model has [10, 256] F32"
expect_out "DAMAGED  T3/step-00000008: 'T3/step-00000008/optimizer.safetensors': tensor '2.bias.momentum' of state.json's optimizer (sgd, momentum 0.9) is missing"
expect_out "DAMAGED  T4/step-00000016: 'T4/step-00000016/ema.safetensors' holds 7 tensors where state.json's model has 6: 'extra\x1b[2J' is not one of them"
! grep -q $'\x1b' "$tmp/out" || fail "verify: a tensor name's escape sequence reached the terminal"
# an ema.safetensors that state.json does not record (its "ema" gone): damaged, as the reverse is
# (it verified ok, and a resume with --ema restarted the average from the weights without a word)
mkdir -p T5 && cp -r R/step-00000016 T5/
python3 - T5/step-00000016/state.json <<'PY'
import json, sys
st = json.load(open(sys.argv[1]))
del st["ema"]
json.dump(st, open(sys.argv[1], "w"))
PY
fixman T5/step-00000016
run 1 verify T5
expect_out "DAMAGED  T5/step-00000016: 'T5/step-00000016/state.json' records no EMA of the weights but the manifest lists ema.safetensors"
train 1 "${V[@]}" --checkpoint-dir T2 --resume auto --max-steps 9
expect_rc 0
expect_out "skipping damaged checkpoint 'T2/step-00000016': 'T2/step-00000016/model.safetensors': tensor '4.weight' is [256, 10] F32"
expect_out "resumed from T2/step-00000008 at step 8"

# SGD saved without momentum, resumed with it: warnings, its momentum starting afresh, and the run
# goes on (it stopped: "no tensor '0.weight.momentum' for this run's optimizer"; the reverse warned)
train 1 "${V[@]}" --checkpoint-dir M0 --max-steps 8 --momentum 0
expect_rc 0
train 1 "${V[@]}" --checkpoint-dir M0 --max-steps 9 --resume auto
expect_rc 0
expect_out "[lockstep warn] 'M0/step-00000008/optimizer.safetensors' holds no momentum (the checkpoint's sgd kept none): this run's momentum, 0.9, starts afresh as a new optimizer's (each buffer the gradient of its first step)"
expect_out "[lockstep warn] optimizer settings changed since the checkpoint (momentum 0 -> 0.9); this run's apply"
expect_out "resumed from M0/step-00000008 at step 8"
expect_out "saved checkpoint M0/step-00000009 (step 9)"
run 0 info M0
expect_out "step        9 (optimizer steps 9)"
expect_out "optimizer   sgd: lr 0.05, momentum 0.9"

# state.json's text in info: its control bytes escaped too
mkdir -p X && cp -r V/step-00000008 X/
python3 - X/step-00000008/state.json <<'PY'
import json, sys
st = json.load(open(sys.argv[1]))
st["settings"]["--precision"] = "fp32\u001b[2J"
json.dump(st, open(sys.argv[1], "w"))
PY
fixman X/step-00000008
run 0 info X
expect_out "settings    --clip-grad-norm 0, --precision fp32\x1b[2J, "
! grep -q $'\x1b' "$tmp/out" || fail "info: state.json's escape sequence reached the terminal"

# sizes before contents: a state.json grown to 1 GB (sparse) is refused by its size, without
# reading it (1.2 GB of memory, then the same message), a manifest of 1 GB as too large (read,
# then "ok"), a state.json of 100 MB that the manifest records too; bytes after the manifest's
# JSON are damage (they verified ok)
mkdir -p G1 G2 G3 G4
for d in G1 G2 G3 G4; do cp -r V/step-00000008 $d/; done
n=$(stat -c %s V/step-00000008/state.json)
truncate -s 1G G1/step-00000008/state.json G2/step-00000008/manifest.json
echo 'GARBAGE {' >>G3/step-00000008/manifest.json
truncate -s 100M G4/step-00000008/state.json
python3 - G4/step-00000008/manifest.json <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
for f in m["files"]:
    if f["name"] == "state.json":
        f["size"] = 100 << 20
json.dump(m, open(sys.argv[1], "w"))
PY
peak() { # ARGS: the tool's exit status and its peak memory in KiB beyond its --help's, output in $tmp/out
    python3 - "$TOOL" "$tmp/out" "$@" <<'PY'
import resource, subprocess, sys
tool, out, args = sys.argv[1], sys.argv[2], sys.argv[3:]
subprocess.run([tool, "--help"], stdout=subprocess.DEVNULL)
base = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
r = subprocess.run([tool] + args, stdout=open(out, "w"), stderr=subprocess.STDOUT)
print(r.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss - base)
PY
}
read -r rc kib < <(peak verify G1 G2 G3 G4)
expect_rc 1
[ "$kib" -lt 262144 ] || fail "verify of a 1 GB state.json and manifest took $kib KiB more than --help"
expect_out "DAMAGED  G4/step-00000008: 'G4/step-00000008/state.json': 104857600 bytes, more than a state.json's limit of 67108864 (damaged)"
expect_out "DAMAGED  G1/step-00000008: 'G1/step-00000008/state.json': 1073741824 bytes but the manifest records $n (damaged)"
expect_out "DAMAGED  G2/step-00000008: 'G2/step-00000008/manifest.json': 1073741824 bytes, more than a manifest's limit of 1048576 (damaged manifest)"
grep -qE "^DAMAGED  G3/step-00000008: 'G3/step-00000008/manifest.json': bytes after its JSON object, at byte [0-9]+ \(damaged manifest\)$" \
    "$tmp/out" || fail "verify: bytes after the manifest's JSON not refused"

# a manifest that is a symlink loop is that, not "missing"
mkdir -p Q && cp -r V/step-00000008 Q/
rm Q/step-00000008/manifest.json && ln -s manifest.json Q/step-00000008/manifest.json
run 1 verify Q
expect_out "DAMAGED  Q/step-00000008: 'Q/step-00000008/manifest.json': Too many levels of symbolic links"

# --keep-last's removal cut short (here by a directory inside the checkpoint, which unlink cannot
# remove): the checkpoint is gone from view whole, debris the next save clears, never a step-S
# that verify calls damaged; the warning says why (it said rmdir's "Directory not empty")
train 1 "${V[@]}" --checkpoint-dir P --max-steps 8 --save-every 8
expect_rc 0
mkdir P/step-00000008/sub
train 1 "${V[@]}" --checkpoint-dir P --max-steps 16 --save-every 8 --keep-last 1 --resume auto
expect_rc 0
expect_out "could not remove 'P/step-00000008.prune.tmp' completely: Is a directory"
run 0 verify P
expect_out "ok       P/step-00000016 (step 16)"
! grep -q DAMAGED "$tmp/out" || fail "a pruned checkpoint left half removed: $(cat "$tmp/out")"

# a directory named latest (each save replaces DIR/latest, a file) is refused before training: it
# stopped the run after its first checkpoint was written
mkdir -p L/latest
train 1 "${V[@]}" --checkpoint-dir L
expect_rc 1
expect_out "'L/latest' is a directory, not a file: each save writes the newest checkpoint's name there (remove or rename it)"
[ ! -e L/step-00000008 ] || fail "a checkpoint was written into L before the refusal"
if [ -n "$RESNET" ]; then # a ResNet's blocks: their layers in brackets, the shortcut after '|', repeats counted
    "$RESNET" --widths 4,8 --blocks 2 --max-steps 1 --save-every 1 --checkpoint-dir "$tmp/RN" --train-limit 64 \
        --test-limit 16 --batch-size 16 --no-progress >"$tmp/out" 2>&1 || fail "the ResNet run: $(tail -n 2 "$tmp/out")"
    run 0 info "$tmp/RN"
    b="BatchNorm2d(eps=1e-05, momentum=0.1"
    expect_out "layers      Reshape(1x28x28), Conv2d(stride=1, padding=1, groups=1), $b, relu), Residual(relu)[Conv2d(stride=1, padding=1, groups=1), $b, relu), Conv2d(stride=1, padding=1, groups=1), $b)] x 2, Residual(relu)[Conv2d(stride=2, padding=1, groups=1), $b, relu), Conv2d(stride=1, padding=1, groups=1), $b) | Conv2d(stride=2, padding=0, groups=1), $b)], Residual(relu)["
fi
# the newest checkpoint holding a file this user may not read (root reads any: as root, run as
# nobody): not damaged, so neither a resume nor info falls back past it (a resume went on from the
# checkpoint before, and its save of the same step replaced the newest one: the work since lost)
as=()
[ "$(id -u)" != 0 ] || as=(setpriv --reuid=65534 --regid=65534 --clear-groups)
if [ ${#as[@]} -eq 0 ] || { command -v setpriv >/dev/null && "${as[@]}" test -x "$PROG" && "${as[@]}" test -x "$TOOL"; }; then
    U=(--train-limit 256 --test-limit 100 --hidden 16 --batch-size 64 --no-progress --checkpoint-dir NR/ck)
    train 1 "${U[@]}" --max-steps 4 --save-every 2
    expect_rc 0
    if [ ${#as[@]} -gt 0 ]; then chmod 755 "$tmp" && chown -R 65534:65534 NR; fi
    chmod 0 NR/ck/step-00000004/model.safetensors
    denied="'NR/ck/step-00000004/model.safetensors': cannot open: Permission denied"
    "${as[@]}" "$PROG" "${U[@]}" --max-steps 6 --save-every 1 --resume auto >"$tmp/out" 2>&1
    rc=$?
    expect_rc 1
    expect_out "$NAME: --resume: I/O error: $denied (this user may not read it: not resuming from an older checkpoint; make it readable, or give one with --resume PATH)"
    ! grep -q "resumed from\|^epoch" "$tmp/out" || fail "resumed past a checkpoint this user may not read"
    [ "$(stat -c %a NR/ck/step-00000004/model.safetensors)" = 0 ] || fail "the unreadable checkpoint was replaced"
    "${as[@]}" "$TOOL" info NR/ck >"$tmp/out" 2>&1
    rc=$?
    expect_rc 1
    expect_out "$denied (this user may not read it: not falling back to an older checkpoint; make it readable, or name one, NR/ck/step-N, to use it)"
    "${as[@]}" "$TOOL" verify NR/ck >"$tmp/out" 2>&1
    rc=$?
    expect_rc 1
    expect_out "ok       NR/ck/step-00000002 (step 2)"
    expect_out "UNREADABLE  NR/ck/step-00000004: $denied"
    # a checkpoint directory this user may list but not search (chmod -R 644): its step-N were
    # "not a directory" to a resume, which started afresh without a word; verify said so too
    chmod 644 NR/ck/step-00000004/model.safetensors NR/ck
    nosearch="'NR/ck': cannot look into the checkpoint directory: Permission denied (this user may read its names but not search it: no x permission)"
    "${as[@]}" "$PROG" "${U[@]}" --max-steps 6 --resume auto >"$tmp/out" 2>&1
    rc=$?
    expect_rc 1
    expect_out "$NAME: --resume: I/O error: $nosearch"
    ! grep -q "starting from step 0\|^epoch" "$tmp/out" || fail "started afresh beside checkpoints it may not look at"
    "${as[@]}" "$TOOL" info NR/ck >"$tmp/out" 2>&1
    rc=$?
    expect_rc 1
    expect_out "$nosearch"
    "${as[@]}" "$TOOL" verify NR/ck >"$tmp/out" 2>&1
    rc=$?
    expect_rc 1
    expect_out "UNREADABLE  NR/ck: cannot look into it: Permission denied (this user may read its names but not search it: no x permission)"
    ! grep -q "^NONE\|^note" "$tmp/out" || fail "verify of a directory it may not search: $(cat "$tmp/out")"
    # diff of a checkpoint in it: the permission said (its files were "only in" the other one)
    chmod 755 NR/ck
    chmod 0 NR/ck/step-00000004
    "${as[@]}" "$TOOL" diff NR/ck/step-00000002 NR/ck/step-00000004 >"$tmp/out" 2>&1
    rc=$?
    expect_rc 2
    expect_out "lockstep-ckpt: diff: 'NR/ck/step-00000004': cannot look into it: Permission denied"
    ! grep -q "only in" "$tmp/out" || fail "diff of a checkpoint it may not look into: $(cat "$tmp/out")"
    chmod 755 NR/ck/step-00000004
    echo "ok: a checkpoint this user may not read"
else
    echo "note: cannot run the programs as nobody here; a checkpoint this user may not read is left out"
fi
echo "PASS"

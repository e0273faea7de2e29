#!/usr/bin/env bash
# check_metrics.sh MLP LOCKSTEP_RUN METRICS_CHECK [CUDA_BUILT]: fashion_mlp --metrics writes one JSON object per
# optimizer step that agrees with --log-steps (metrics_check.c says what is checked): one rank;
# with --clip-grad-norm (grad_norm appears) and a resume from step 5 after a run that died after
# step 7 (its final checkpoint removed: steps 6 and 7 are written once, by the resumed run); a run
# without --metrics or --log-steps (running totals) prints the same epoch lines; two ranks (the samples are the
# global batch); --progress's last reading of an epoch equals its train loss (LOCKSTEP_STDERR_TTY=1 shows it on a pipe, not in a file; a warning of rank 1 gets a line of its own); each epoch's printed train accuracy is the mean of its steps'; a diverging run's
# NaN loss is written as null (its hint, when it clips, is of a lower --clip-grad-norm); each step's lr follows --lr-schedule linear (to --min-lr) and constant;
# a file that cannot be opened is an error naming it, one file for --metrics and --log-steps too
# (or for either and --dump-params);
# on resume a file is cut back in place (its inode and mode kept; in a read-only directory);
# /dev/stdout, stdout a file, takes the lines in order with stdout's. CUDA_BUILT (1 in a
# CUDA build): two ranks without a usable GPU say once, not twice, that they run on the CPU. Two
# diverging ranks with fp16 gradient compression skip their steps, and the epoch lines count them.
# An fp16 run whose every step overflows halves its loss scale to 2^-126, not to 0, and resumes.
set -u
mlp=$1 run=$2 check=$3 cuda_built=${4:-0}
dir=$(mktemp -d)
reader=
trap '[ -z "$reader" ] || kill $reader 2>/dev/null; rm -rf "$dir"' EXIT
args=(--epochs 2 --train-limit 1000 --test-limit 200 --batch-size 100 --no-progress)
fail() { echo "FAIL: $*"; exit 1; }

"$mlp" "${args[@]}" --metrics "$dir/m1" --log-steps "$dir/s1" >"$dir/out1" 2>&1 || fail "run 1: $(cat "$dir/out1")"
head -n 2 "$dir/m1"
"$check" "$dir/m1" "$dir/s1" 20 100 10 noclip "$dir/out1" || fail "one rank"
# without a per-step file the steps read no stats (the epoch's figures come from the trainer's
# running totals, read once an epoch): the same epoch lines, loss and accuracy to the last digit
"$mlp" "${args[@]}" >"$dir/out0" 2>&1 || fail "run without --metrics: $(cat "$dir/out0")"
epochs() { grep '^epoch' "$1" | sed 's/  [0-9.]* samples\/s.*//'; }
[ -n "$(epochs "$dir/out1")" ] && [ "$(epochs "$dir/out0")" = "$(epochs "$dir/out1")" ] ||
    fail "epoch lines differ without --metrics: $(epochs "$dir/out0") / $(epochs "$dir/out1")"
# the progress line (peeked totals, no wait): on the CPU every step has arrived, so its last
# reading of an epoch is that epoch's train loss; the epoch lines are unchanged
"$mlp" "${args[@]/--no-progress/--progress}" >"$dir/outp" 2>"$dir/errp" || fail "--progress: $(cat "$dir/errp")"
[ "$(epochs "$dir/outp")" = "$(epochs "$dir/out0")" ] || fail "epoch lines differ with --progress"
lastp=$(tr '\r' '\n' <"$dir/errp" | grep -E '^epoch 1  step 10/10  loss [0-9.]+ ' | sed 's/.*loss \([0-9.]*\) .*/\1/')
train1=$(grep '^epoch 1 ' "$dir/outp" | sed 's/.*train loss \([0-9.]*\) .*/\1/')
[ -n "$lastp" ] && [ "$lastp" = "$train1" ] || fail "progress line's last loss '$lastp', epoch 1's train loss '$train1'"

# LOCKSTEP_STDERR_TTY=1 (lockstep-run's stderr is a terminal) stands for a rank's stderr that is
# the launcher's pipe: a rank whose stderr is a file (`sh -c 'prog 2>rank0.log'` under lockstep-run)
# wrote its progress lines, carriage returns and escapes, into that log
LOCKSTEP_STDERR_TTY=1 "$mlp" "${args[@]:0:6}" --max-steps 3 >"$dir/outf" 2>"$dir/errf" ||
    fail "LOCKSTEP_STDERR_TTY=1, stderr a file: $(cat "$dir/errf")"
! grep -q 'samples/s' "$dir/errf" || fail "LOCKSTEP_STDERR_TTY=1: a progress line went into a file: $(cat -v "$dir/errf")"
LOCKSTEP_STDERR_TTY=1 "$mlp" "${args[@]:0:6}" --max-steps 3 2>&1 >"$dir/outf" | cat >"$dir/errf"
grep -q 'samples/s' "$dir/errf" || fail "LOCKSTEP_STDERR_TTY=1, stderr a pipe: no progress line: $(cat -v "$dir/errf")"

c=(--clip-grad-norm 1.0 --checkpoint-dir "$dir/ck" --save-every 5 --metrics "$dir/m2" --log-steps "$dir/s2")
"$mlp" "${args[@]}" "${c[@]}" --max-steps 7 >"$dir/out2" 2>&1 || fail "run 2: $(cat "$dir/out2")"
[ "$(wc -l <"$dir/m2")" -eq 7 ] || fail "the stopped run wrote $(wc -l <"$dir/m2") lines, want 7"
rm -rf "$dir/ck/step-00000007" # as if it had died after step 7, before its final checkpoint
"$mlp" "${args[@]}" "${c[@]}" --resume auto >"$dir/out3" 2>&1 || fail "resume: $(cat "$dir/out3")"
grep -q "resumed from .* at step 5" "$dir/out3" || fail "did not resume from step 5: $(cat "$dir/out3")"
"$check" "$dir/m2" "$dir/s2" 20 100 10 clip || fail "clipping and resume"

# on resume only a regular file is cut back to the resumed step: a symbolic link stays one (its
# target is rewritten), a FIFO is appended to (reading it waited for ever), as a device would be
c=(--checkpoint-dir "$dir/ck4" --save-every 5)
"$mlp" "${args[@]}" "${c[@]}" --max-steps 7 --log-steps "$dir/s4target" >"$dir/out7" 2>&1 || fail "run 7: $(cat "$dir/out7")"
rm -rf "$dir/ck4/step-00000007"
ln -s s4target "$dir/s4link"
mkfifo "$dir/fifo"
cat "$dir/fifo" >"$dir/fifo.out" &
reader=$!
timeout -k 5 60 "$mlp" "${args[@]}" "${c[@]}" --max-steps 9 --resume auto --log-steps "$dir/s4link" --metrics "$dir/fifo" \
    >"$dir/out8" 2>&1 || fail "resume into a link and a FIFO (status $?): $(cat "$dir/out8")"
wait $reader
reader=
[ -L "$dir/s4link" ] && [ -p "$dir/fifo" ] || fail "the resume replaced the link or the FIFO: $(ls -l "$dir")"
[ "$(cut -d' ' -f1 "$dir/s4target" | tr '\n' ' ')" = "1 2 3 4 5 6 7 8 9 " ] ||
    fail "the link's target holds steps $(cut -d' ' -f1 "$dir/s4target" | tr '\n' ' '), want 1 to 9 once"
[ "$(grep -c '"step"' "$dir/fifo.out")" = 4 ] || fail "the FIFO got $(grep -c '"step"' "$dir/fifo.out") steps, want 4"

# a file cut back on resume is cut in place: it keeps its inode and mode (it was rewritten as
# FILE.tmp and renamed over: a new 0644 file of the runner's, a hard link broken), and a file the
# run may write in a directory it may not (a shared log directory) resumes (it failed: "cannot
# create '.../s.tmp': Permission denied", a file the user never named)
mkdir "$dir/logs"
c=(--checkpoint-dir "$dir/ck5" --save-every 5 --metrics "$dir/logs/m" --log-steps "$dir/logs/s")
"$mlp" "${args[@]}" "${c[@]}" --max-steps 7 >"$dir/out9" 2>&1 || fail "run 9: $(cat "$dir/out9")"
rm -rf "$dir/ck5/step-00000007"
chmod 600 "$dir/logs/m" "$dir/logs/s"
ln "$dir/logs/m" "$dir/mlink"
ino=$(stat -c %i "$dir/logs/m")
as=()
if [ "$(id -u)" = 0 ]; then # root writes in any directory: the resumed run is nobody's
    as=(setpriv --reuid=65534 --regid=65534 --clear-groups)
    chmod 755 "$dir"
    chown -R 65534 "$dir/ck5" "$dir/logs"
    "${as[@]}" "$mlp" --help >/dev/null 2>&1 || as=(none)
fi
chmod 555 "$dir/logs"
if [ "${as[*]}" != none ]; then
    "${as[@]}" "$mlp" "${args[@]}" "${c[@]}" --max-steps 9 --resume auto >"$dir/out10" 2>&1 ||
        fail "resume with the files in a directory it cannot write: $(cat "$dir/out10")"
    [ "$(cut -d' ' -f1 "$dir/logs/s" | tr '\n' ' ')" = "1 2 3 4 5 6 7 8 9 " ] ||
        fail "--log-steps in a read-only directory holds steps $(cut -d' ' -f1 "$dir/logs/s" | tr '\n' ' '), want 1 to 9"
else
    echo "(the program cannot run as nobody here: the read-only directory is left out)"
    chmod 755 "$dir/logs"
    "$mlp" "${args[@]}" "${c[@]}" --max-steps 9 --resume auto >"$dir/out10" 2>&1 || fail "resume: $(cat "$dir/out10")"
fi
chmod 755 "$dir/logs"
[ "$(grep -c '"step"' "$dir/logs/m")" = 9 ] || fail "--metrics holds $(grep -c '"step"' "$dir/logs/m") steps after the resume, want 9"
[ "$(stat -c %i.%a "$dir/logs/m")" = "$ino.600" ] && [ "$(stat -c %h "$dir/mlink")" = 2 ] ||
    fail "the resume replaced --metrics: inode.mode $(stat -c %i.%a "$dir/logs/m"), was $ino.600; links $(stat -c %h "$dir/mlink")"
! ls "$dir/logs" | grep -q tmp || fail "a temporary file was left: $(ls "$dir/logs")"

# the progress line and log lines: a warning in the middle of an epoch (here: a newer checkpoint
# than the one just written) gets a line of its own, the progress line cleared first (it was
# appended to it)
mkdir -p "$dir/pc/step-00099999"
"$mlp" "${args[@]:0:6}" --max-steps 6 --save-every 3 --checkpoint-dir "$dir/pc" --progress \
    >"$dir/outpc" 2>"$dir/errpc" || fail "progress with a warning: $(cat "$dir/errpc")"
grep -q "is newer than the checkpoint just written" "$dir/errpc" || fail "no warning to test: $(cat "$dir/errpc")"
! tr '\r' '\n' <"$dir/errpc" | grep -q 'samples/s.*\[lockstep' || fail "a warning appended to the progress line"

if "$run" -n 2 --dry-run true >/dev/null 2>&1; then
    "$run" -n 2 "$mlp" "${args[@]}" --batch-size 50 --metrics "$dir/m3" --log-steps "$dir/s3" >"$dir/out4" 2>&1 ||
        fail "two ranks: $(cat "$dir/out4")"
    "$check" "$dir/m3" "$dir/s3" 20 100 10 noclip "$dir/out4" || fail "two ranks"
    # the progress line: rank 0's alone, of the mean over the ranks (each rank printed its own
    # loss), on by default where lockstep-run's stderr is a terminal (LOCKSTEP_STDERR_TTY=1)
    for how in --progress tty; do
        flag=(--progress)
        [ $how = tty ] && flag=()
        LOCKSTEP_STDERR_TTY=$([ $how = tty ] && echo 1 || echo 0) "$run" -n 2 "$mlp" "${args[@]:0:6}" \
            --batch-size 50 "${flag[@]}" >"$dir/outp2" 2>"$dir/errp2" || fail "two ranks, $how: $(cat "$dir/errp2")"
        lastp=$(tr '\r' '\n' <"$dir/errp2" | grep -E '^epoch 1  step 10/10  loss [0-9.]+ ' | sed 's/.*loss \([0-9.]*\) .*/\1/')
        train1=$(grep '^epoch 1 ' "$dir/outp2" | sed 's/.*train loss \([0-9.]*\) .*/\1/')
        [ -n "$lastp" ] && [ "$lastp" = "$train1" ] ||
            fail "two ranks, $how: the progress lines' last losses '$lastp' (once), epoch 1's train loss '$train1'"
    done
    # a warning of rank 1 during an epoch goes to the terminal rank 0's progress line is on (through
    # lockstep-run): it gets a line of its own too (it was appended to rank 0's line)
    LOCKSTEP_AMP_INJECT_INF=3:1 "$run" -n 2 "$mlp" "${args[@]:0:6}" --batch-size 50 --precision fp16 --max-steps 5 \
        --progress >"$dir/outp3" 2>"$dir/errp3" || fail "two ranks, a warning of rank 1: $(cat "$dir/errp3")"
    grep -q '\[lockstep r1 warn\] LOCKSTEP_AMP_INJECT_INF' "$dir/errp3" || fail "no warning of rank 1: $(cat "$dir/errp3")"
    ! tr '\r' '\n' <"$dir/errp3" | grep -q 'samples/s.*\[lockstep' ||
        fail "rank 1's warning appended to rank 0's progress line: $(cat -v "$dir/errp3")"
    # a CUDA build without a usable GPU says it runs on the CPU once a node, not once a rank
    want=0
    [ "$cuda_built" = 1 ] && grep -q "device cpu" "$dir/out4" && want=1
    [ "$(grep -c 'no usable CUDA device (.*); running on the CPU' "$dir/out4")" = "$want" ] ||
        fail "two ranks on one node should say $want time(s) that they run on the CPU: $(cat "$dir/out4")"
    # lines logged before the trainer knows its rank carry it too (the launcher's variables): a bad
    # LOCKSTEP_LOG was said twice without saying by whom
    out=$(LOCKSTEP_LOG=bogus "$run" -n 2 "$mlp" "${args[@]}" --epochs 0 2>&1) || fail "LOCKSTEP_LOG=bogus: $out"
    [ "$(grep -c "^\[lockstep r[01] warn\] LOCKSTEP_LOG='bogus' is not one of" <<<"$out")" = 2 ] ||
        fail "LOCKSTEP_LOG=bogus on 2 ranks: not one line of each rank's: $out"
    # on a machine without the NVIDIA driver, that there is none (it said "CUDA driver version is
    # insufficient for CUDA runtime version", as to upgrade a driver it does not have)
    if [ "$want" = 1 ] && [ ! -e /proc/driver/nvidia/version ] && ! ldconfig -p | grep -q 'libcuda\.so\.1 '; then
        grep -q 'no usable CUDA device (no NVIDIA driver on this machine: libcuda.so.1 not found, no /proc/driver/nvidia (cudaErrorInsufficientDriver)); running on the CPU' \
            "$dir/out4" || fail "a machine without the NVIDIA driver is not said to be one: $(grep 'CUDA device' "$dir/out4")"
    fi
    # fp16 gradient compression in f32 training: a diverging run's inf/NaN gradients skip the step
    # on every rank (as a loss scaler would), where f32 all-reduces let them through
    for c in fp16 none; do
        LOCKSTEP_GRAD_COMPRESS=$c "$run" -n 2 "$mlp" "${args[@]}" --lr 1e30 --max-steps 6 --metrics "$dir/m6$c" \
            >"$dir/out6$c" 2>&1 || fail "diverging two-rank run ($c): $(cat "$dir/out6$c")"
    done
    [ "$(grep -c '"skipped": 1' "$dir/m6fp16")" -ge 4 ] || fail "fp16 compression did not skip: $(cat "$dir/m6fp16")"
    # and the epoch lines say how many (from the running totals): as many as --metrics shows
    n6=$(grep -c '"skipped": 1' "$dir/m6fp16")
    said=$(sed -nE 's/^epoch .*  \(([0-9]+) steps? skipped: inf\/NaN gradients\)$/\1/p' "$dir/out6fp16" | awk '{ s += $1 } END { print s + 0 }')
    [ "$said" = "$n6" ] ||
        fail "the epoch lines say $said steps were skipped, --metrics $n6: $(grep '^epoch' "$dir/out6fp16")"
    ! grep -q "skipped: inf" "$dir/out6none" || fail "f32 all-reduces reported skipped steps"
    [ "$(grep -c '"skipped": 1' "$dir/m6none")" = 0 ] || fail "f32 all-reduces skipped steps: $(cat "$dir/m6none")"
else
    echo "(no MPI launcher here: the two-rank case is left out)"
fi

# a diverging run (learning rate 1e30): its NaN losses are written as null, so every line stays JSON
"$mlp" "${args[@]}" --lr 1e30 --max-steps 6 --metrics "$dir/m5" --log-steps "$dir/s5" >"$dir/out5" 2>&1 ||
    fail "diverging run: $(cat "$dir/out5")"
"$check" "$dir/m5" "$dir/s5" 6 100 10 diverged || fail "diverging run"
# and it says so, once (it printed "train loss nan" and exited 0 without a word)
[ "$(grep -c '^fashion_mlp: the train loss is nan: the training diverged (a lower --lr' "$dir/out5")" = 1 ] ||
    fail "diverging run: no hint, or more than one: $(cat "$dir/out5")"
# a run that clips already is not told to clip, but of a lower --clip-grad-norm
"$mlp" "${args[@]}" --lr 1e30 --max-steps 2 --clip-grad-norm 2.5 >"$dir/out5c" 2>&1 || fail "diverging run, clipping: $(cat "$dir/out5c")"
grep -q '^fashion_mlp: the train loss is nan: the training diverged (a lower --lr, a longer --warmup-steps or a --clip-grad-norm below 2.5 may help)$' \
    "$dir/out5c" || fail "diverging run, clipping: the hint: $(cat "$dir/out5c")"
# a loss that is huge but finite (a run diverging, 3 steps at --lr 20) reads in exponent form on the
# epoch and EMA lines (they printed "test loss 138725807062935552.0000", 36 digits at 4 steps)
"$mlp" "${args[@]}" --lr 20 --warmup-steps 0 --max-steps 3 --ema 0.5 >"$dir/out5h" 2>&1 || fail "huge loss: $(cat "$dir/out5h")"
grep -Eq '^epoch 1  train loss [1-9]\.[0-9]{4}e\+[0-9]{2}  train acc [0-9.]+%  test loss [1-9]\.[0-9]{4}e\+[0-9]{2}  test acc ' \
    "$dir/out5h" || fail "huge loss: the epoch line: $(cat "$dir/out5h")"
grep -Eq '^  EMA of the weights \(decay 0\.5\): test loss [1-9]\.[0-9]{4}e\+[0-9]{2}  test acc ' "$dir/out5h" ||
    fail "huge loss: the EMA line: $(cat "$dir/out5h")"
! grep -Eq '[0-9]{12}' "$dir/out5h" || fail "huge loss: printed in all its digits: $(cat "$dir/out5h")"
# the epoch line's NaN is "nan", as the hint's (printf wrote the sign bit's "-nan")
grep -q '^epoch 1  train loss nan  ' "$dir/out5" || fail "diverging run: the epoch line's loss: $(cat "$dir/out5")"
# and so are --log-steps' and the progress line's (they wrote "-nan": the progress line's last
# reading of the epoch is its train loss, and here it was not)
grep -q '^6 nan$' "$dir/s5" && ! grep -q -- '-nan' "$dir/s5" || fail "diverging run: --log-steps' NaN: $(cat "$dir/s5")"
"$mlp" "${args[@]/--no-progress/--progress}" --epochs 1 --lr 1e30 >"$dir/outp5" 2>"$dir/errp5" ||
    fail "diverging run, --progress: $(cat "$dir/errp5")"
lastp=$(tr '\r' '\n' <"$dir/errp5" | grep -E '^epoch 1  step 10/10  loss ' | sed 's/.*loss \([^ ]*\) .*/\1/')
[ "$lastp" = nan ] && grep -q '^epoch 1  train loss nan  ' "$dir/outp5" ||
    fail "diverging run: the progress line's last loss '$lastp', the epoch line: $(grep '^epoch' "$dir/outp5")"

# fp16, every step overflowing (a model gone NaN at lr 1e30): the loss scale halves to its floor,
# 2^-126, and stays there; the run's checkpoint resumes. It reached 0 after 1075 skipped steps, and
# the resume refused the checkpoint the run had written ("the loss scale 0 is not a number > 0").
fa=(--epochs 2 --train-limit 8800 --test-limit 100 --batch-size 8 --hidden 8 --no-progress --precision fp16
    --lr 1e30 --warmup-steps 1 --lr-schedule constant --checkpoint-dir "$dir/c7")
"$mlp" "${fa[@]}" --max-steps 1100 --save-every 1100 --metrics "$dir/m7" >"$dir/out7" 2>&1 ||
    fail "diverging fp16 run: $(cat "$dir/out7")"
scales=$(sed -nE 's/.*"loss_scale": ([^,]*),.*/\1/p' "$dir/m7")
[ "$(head -n 1 <<<"$scales")" = 65536 ] && [ "$(tail -n 1 <<<"$scales")" = 1.1754943508222875e-38 ] &&
    [ "$(sort -g <<<"$scales" | head -n 1)" = 1.1754943508222875e-38 ] ||
    fail "diverging fp16 run: the loss scale went from $(head -n 1 <<<"$scales") to $(sort -g <<<"$scales" | head -n 1), not to its floor 2^-126"
grep -qE '^epoch 1 .*\(1099 steps skipped: inf/NaN gradients\)$' "$dir/out7" ||
    fail "diverging fp16 run: the skipped steps are not counted: $(grep '^epoch' "$dir/out7")"
"$mlp" "${fa[@]}" --resume auto --max-steps 1102 >"$dir/out7r" 2>&1 ||
    fail "the diverged fp16 run's checkpoint does not resume: $(cat "$dir/out7r")"
grep -q "^fashion_mlp: resumed from $dir/c7/step-00001100 at step 1100, the end of epoch 1" "$dir/out7r" ||
    fail "diverged fp16 run's resume: $(cat "$dir/out7r")"
# an epoch whose every step was skipped says so: no step was taken (it said "2 steps skipped")
grep -qE '^epoch 2 .*  \(all 2 steps skipped: inf/NaN gradients, no step taken this epoch\)$' "$dir/out7r" ||
    fail "diverged fp16 run's resume: an epoch of skipped steps only: $(grep '^epoch' "$dir/out7r")"

# the learning rate of each step follows --lr-schedule: 20 steps, 5 of warmup to 0.1, then linear
# to --min-lr 0.01 at the last step (0.01 + 0.09 (1 - t), t = (step - 5) / 15), or constant
lrs() { sed -nE 's/.*"step": ([0-9]+),.*"lr": ([^,]*),.*/\1 \2/p' "$1"; }
for sched in linear constant; do
    minlr=(--min-lr 0.01) # refused with constant (ffa6b60): it has no minimum to decay to
    [ $sched = constant ] && minlr=()
    "$mlp" "${args[@]}" --lr 0.1 --warmup-steps 5 --lr-schedule $sched "${minlr[@]}" --metrics "$dir/mlr" \
        >"$dir/outlr" 2>&1 || fail "--lr-schedule $sched: $(cat "$dir/outlr")"
    [ "$(lrs "$dir/mlr" | wc -l)" -eq 20 ] || fail "--lr-schedule $sched: $(lrs "$dir/mlr" | wc -l) steps"
    lrs "$dir/mlr" | awk -v s=$sched '{ i = $1 - 1
        if (i < 5) want = 0.1 * (i + 1) / 5; else if (s == "constant") want = 0.1; else want = 0.01 + 0.09 * (1 - (i - 5) / 15)
        d = $2 - want; if (d < 0) d = -d
        if (d > 1e-6 * want) { print s ": step " $1 " lr " $2 ", expected " want; bad = 1 } } END { exit bad }' ||
        fail "--lr-schedule $sched: the learning rates depart from the schedule"
done

out=$("$mlp" "${args[@]}" --metrics /nonexistent-dir/m 2>&1) && fail "an unwritable --metrics path was accepted"
grep -q -- "--metrics: I/O error: cannot open '/nonexistent-dir/m' for writing: No such file or directory" <<<"$out" || fail "unclear error: $out"
out=$("$mlp" "${args[@]}" --log-steps "$dir" 2>&1) && fail "a directory as --log-steps was accepted"
grep -q -- "--log-steps: I/O error: cannot open '$dir' for writing: Is a directory" <<<"$out" || fail "unclear error: $out"
# --metrics and --log-steps naming one file (through another name too) is refused: each wrote
# its lines over the other's, and the run ended 0 with a file of neither (a JSON line cut by a
# "step loss" one); a device (/dev/null) may take both
ln -s same "$dir/same.link"
out=$("$mlp" "${args[@]}" --metrics "$dir/same.link" --log-steps "$dir/same" 2>&1) && fail "one file for --metrics and --log-steps was accepted: $out"
grep -q -- "--metrics: invalid argument: '$dir/same.link' is the file of --log-steps too: each would write over the other's lines" <<<"$out" ||
    fail "one file for --metrics and --log-steps: unclear error: $out"
# nor --dump-params with either (through another name too): the dump, renamed over the path
# after training, replaced the step file's lines with raw floats, and the run ended 0
for flag in --metrics --log-steps; do
    rm -f "$dir/dump"
    out=$("$mlp" "${args[@]}" --max-steps 2 $flag "$dir/dump" --dump-params "$dir/./dump" 2>&1) &&
        fail "one file for $flag and --dump-params was accepted: $out"
    grep -q -- "$flag: invalid argument: '$dir/dump' is the file of --dump-params too: the parameters written there after training would replace these lines" <<<"$out" ||
        fail "one file for $flag and --dump-params: unclear error: $out"
done
"$mlp" "${args[@]}" --max-steps 2 --metrics /dev/null --log-steps /dev/null >"$dir/outnull" 2>&1 ||
    fail "--metrics and --log-steps to /dev/null: $(cat "$dir/outnull")"
# /dev/stdout where stdout is a file (--metrics /dev/stdout >run.log): the lines go into stdout's
# own stream, after the lines before them, in order (the file was opened again: truncated, and
# the two streams wrote over each other's lines); a resume appends to it (nothing is cut back)
for how in fresh resume; do
    r=(--max-steps 3)
    if [ $how = resume ]; then
        "$mlp" "${args[@]}" --checkpoint-dir "$dir/ck6" --save-every 2 --max-steps 2 >"$dir/outstd" 2>&1 ||
            fail "run 6: $(cat "$dir/outstd")"
        r=(--checkpoint-dir "$dir/ck6" --save-every 2 --resume auto --max-steps 5)
    fi
    "$mlp" "${args[@]}" "${r[@]}" --metrics /dev/stdout --log-steps /dev/stdout >"$dir/outstd" 2>"$dir/errstd" ||
        fail "--metrics /dev/stdout, stdout a file ($how): $(cat "$dir/errstd")"
    [ "$(head -n 1 "$dir/outstd" | cut -c1-25)" = "fashion_mlp: 1 rank, devi" ] &&
        [ "$(grep -c '^{"step": [0-9]*, .*}$' "$dir/outstd")" = 3 ] && [ "$(grep -cE '^[0-9]+ [0-9.]+$' "$dir/outstd")" = 3 ] &&
        [ "$(grep -c '^epoch 1  train loss' "$dir/outstd")" = 1 ] && [ "$(wc -l <"$dir/outstd")" -ge 8 ] ||
        fail "--metrics and --log-steps /dev/stdout, stdout a file ($how): $(cat "$dir/outstd")"
done
echo "PASS: --metrics agrees with --log-steps (one rank, clipping and resume, two ranks); bad path refused"

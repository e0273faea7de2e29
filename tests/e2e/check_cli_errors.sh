#!/usr/bin/env bash
# check_cli_errors.sh MLP RESNET OOM QUICKSTART [BENCH_MLP [BENCH_CKPT [BENCH_COLLECTIVES]]]: bad input to the example
# programs (and the benchmarks, where built) is refused with an error that
# names the flag or variable and the problem (exit status not 0), where it used to be cut to an
# int, saturated, ignored or trained into NaN: counts past their range (2^32 epochs trained
# nothing; a batch of 2^62 x 2 accumulation steps overflowed to 0 steps an epoch), non-finite
# numbers (--lr inf; --weight-decay 1e39, inf as a float), 7 or more hidden layers (the extra ones were dropped), a trailing comma,
# drop-last with no whole batch (an epoch of no steps, a NaN loss), files that cannot be written
# (/dev/full) or a checkpoint directory that cannot be (found at the first save, after the
# training), a gradient-compression setting on one rank (checked only with two), a memory cap of
# 0 (meant no cap), LOCKSTEP_MPI_CUDA_AWARE=maybe (meant on), LOCKSTEP_MALLOC_TUNING=maybe (kept the tuning), 14 x 14 images (failed at the first
# step, naming no file), a label smoothing of 1 or more, an empty --init-from, an unknown
# --lr-schedule, a negative --min-lr, --min-lr with the constant schedule or above the peak --lr,
# --no-decay-1d with no weight decay to leave out (fashion_mlp's SGD default), --betas not two numbers in [0, 1), --betas or --eps without
# AdamW, --momentum with AdamW, an --ema decay outside [0, 1), --ema-warmup without --ema, a --dropout of 1 (fashion_mlp
# and fashion_resnet) or with no hidden layer to follow, a benchmark driver given a build without its
# programs, a count of 0 or a value out of its range (a traceback, or a run of garbage), a
# benchmark size that holds no element (a table of no rows), a trace that is no trace (a
# traceback). And an empty --hidden trains a linear model, as --help says.
set -u
mlp=$1 resnet=$2 oom=$3 qs=$4 bench=${5:-} bench_ckpt=${6:-} bench_coll=${7:-}
export LOCKSTEP_DEVICE=cpu OPENBLAS_NUM_THREADS=1
small=(--train-limit 256 --test-limit 100 --max-steps 2 --no-progress)
fail() {
    echo "FAIL: $*"
    exit 1
}
# refused WANT PROG ARGS...: PROG fails, and its output holds WANT; usage WANT PROG ARGS...: the
# same with exit status 2 (bad usage: a flag's value)
refused() {
    local want=$1 out rc
    shift
    out=$("$@" 2>&1)
    rc=$?
    [ "$rc" -ne 0 ] || fail "accepted (exit 0): $*: $(tail -n 2 <<<"$out")"
    [ -z "$want_rc" ] || [ "$rc" -eq "$want_rc" ] || fail "$*: exit $rc, want $want_rc: $(tail -n 2 <<<"$out")"
    grep -qF -- "$want" <<<"$out" || fail "$*: exit $rc without '$want': $(tail -n 3 <<<"$out")"
    echo "refused ($rc): ${*:2}"
}
want_rc=
usage() {
    want_rc=2
    refused "$@"
    want_rc=
}

usage "--epochs '4294967296' must be a whole number from 0 to 1000000" "$mlp" "${small[@]}" --epochs 4294967296
# an unknown option: getopt's line and where the options are, not 120 lines of help per rank
for p in "$mlp" "$resnet" "$oom"; do
    usage "unrecognized option '--bogus'" "$p" --bogus
    out=$("$p" --bogus 2>&1)
    [ "$(wc -l <<<"$out")" -eq 2 ] && grep -q "^Try '$(basename "$p") --help' for the options.$" <<<"$out" ||
        fail "$p --bogus: $(head -n 5 <<<"$out")"
done
# a --metrics or --log-steps path that cannot be written is refused before the data is read (and
# before --batch-size auto's trials): it was found after them, 4 minutes into a default
# fashion_resnet --batch-size auto on the CPU; here the data directory does not exist either
nodata=$(mktemp -d)
rmdir "$nodata"
for p in "$mlp" "$resnet"; do
    for f in --metrics --log-steps; do
        out=$("$p" "${small[@]}" --data-dir "$nodata" $f /nonexistent-dir/m 2>&1) && fail "$p $f /nonexistent-dir/m: accepted"
        [ "$out" = "$(basename "$p"): $f: I/O error: cannot open '/nonexistent-dir/m' for writing: No such file or directory" ] ||
            fail "$p $f /nonexistent-dir/m: not refused before reading the data: $out"
    done
    # a directory, and a file it may not write; neither is left changed
    out=$("$p" "${small[@]}" --data-dir "$nodata" --metrics /tmp 2>&1) && fail "$p --metrics /tmp: accepted"
    grep -qxF "$(basename "$p"): --metrics: I/O error: cannot open '/tmp' for writing: Is a directory" <<<"$out" ||
        fail "$p --metrics /tmp: $out"
done
echo "refused before the data: --metrics and --log-steps paths that cannot be written"
usage "--label-smoothing '1' must be a number from 0 to below 1" "$mlp" "${small[@]}" --label-smoothing 1
usage "--label-smoothing 'nan' must be a number from 0 to below 1" "$resnet" "${small[@]}" --label-smoothing nan
usage "--label-smoothing '-0.1' must be a number from 0 to below 1" "$mlp" "${small[@]}" --label-smoothing -0.1
usage "--dropout '1' must be a number from 0 to below 1" "$mlp" "${small[@]}" --dropout 1
usage "--dropout '0.99999999999' must be a number from 0 to below 1 (it rounds to 1 as a float)" "$mlp" "${small[@]}" \
    --dropout 0.99999999999
usage "--dropout: invalid argument: needs a hidden layer to follow (--hidden '' has none)" "$mlp" "${small[@]}" \
    --hidden '' --dropout 0.5
usage "--init-from must not be empty" "$resnet" "${small[@]}" --init-from ''
usage "--lr-schedule: invalid argument: learning-rate schedule 'step' is not one of cosine, linear, constant" "$mlp" \
    "${small[@]}" --lr-schedule step
usage "--lr-schedule must not be empty" "$resnet" "${small[@]}" --lr-schedule ''
usage "--min-lr '-0.1' must be a finite number >= 0" "$resnet" "${small[@]}" --min-lr -0.1
# --min-lr with the constant schedule was dropped without a word
usage "--min-lr: invalid argument: the constant schedule does not decay toward a minimum: add --lr-schedule cosine or linear" \
    "$mlp" "${small[@]}" --lr-schedule constant --min-lr 0.001
# --min-lr above the peak --lr (given, or the optimizer's default) made the "decay" a rise to it:
# fashion_mlp's lr went 0.01, 0.08, 0.25, 0.43 over 4 steps toward --min-lr 0.5
usage "--min-lr: invalid argument: 0.5 is above the peak learning rate 0.01 (--lr): the schedule would rise to it, not decay; give a --min-lr at most --lr" \
    "$mlp" "${small[@]}" --lr 0.01 --min-lr 0.5
usage "--min-lr: invalid argument: 0.01 is above the peak learning rate 0.002 (adamw's default --lr): the schedule would rise to it, not decay; give a --min-lr at most --lr" \
    "$resnet" "${small[@]}" --optimizer adamw --min-lr 0.01
# --no-decay-1d where nothing decays (fashion_mlp's SGD: weight decay 0 by default) changed nothing
usage "--no-decay-1d: invalid argument: the weight decay is 0 (sgd's default --weight-decay), so no parameter decays: add --weight-decay X" \
    "$mlp" "${small[@]}" --no-decay-1d
usage "--betas '0.9' must be two numbers from 0 to below 1, as 0.9,0.999" "$mlp" "${small[@]}" --optimizer adamw \
    --betas 0.9
usage "--betas '0.9,1' must be two numbers from 0 to below 1, as 0.9,0.999" "$resnet" "${small[@]}" --betas 0.9,1
usage "--betas: invalid argument: betas and eps are AdamW's: add --optimizer adamw" "$mlp" "${small[@]}" \
    --betas 0.9,0.95
usage "--eps: invalid argument: betas and eps are AdamW's: add --optimizer adamw" "$resnet" "${small[@]}" --eps 1e-6
# --eps 0: AdamW's step of a weight whose gradients are all 0 is 0/0, NaN (it trained into NaN)
usage "--eps: invalid argument: '0' must be above 0 (AdamW divides by sqrt(v) + eps)" "$mlp" "${small[@]}" \
    --optimizer adamw --eps 0
# --momentum with AdamW was dropped without a word (AdamW has no momentum: its first beta)
usage "--momentum: invalid argument: momentum is SGD's (AdamW's is --betas' first): add --optimizer sgd" "$mlp" \
    "${small[@]}" --optimizer adamw --momentum 0.5
usage "--momentum: invalid argument: momentum is SGD's (AdamW's is --betas' first): add --optimizer sgd" "$resnet" \
    "${small[@]}" --optimizer adamw --momentum 0
usage "--ema '1' must be a number from 0 to below 1" "$mlp" "${small[@]}" --ema 1
usage "--ema '-0.5' must be a number from 0 to below 1" "$resnet" "${small[@]}" --ema -0.5
usage "--ema-warmup: invalid argument: warms up an EMA of the weights: add --ema DECAY" "$resnet" "${small[@]}" \
    --ema-warmup
# --save-async without --save-every did nothing (a signal's checkpoint is written at once either way)
usage "--save-async: invalid argument: writes --save-every's checkpoints in the background: add --save-every N" \
    "$mlp" "${small[@]}" --save-async
usage "--save-async: invalid argument: writes --save-every's checkpoints in the background: add --save-every N" \
    "$resnet" "${small[@]}" --save-async --save-every 0
usage "--eps 'nan' must be a finite number >= 0" "$mlp" "${small[@]}" --optimizer adamw --eps nan
usage "--epochs '99999999999999999999' must be a whole number from 0 to 1000000" "$mlp" --epochs 99999999999999999999
usage "--batch-size '4611686018427387904' must be a whole number from 1 to 16777216" "$mlp" --batch-size 4611686018427387904 --accum-steps 2
usage "--accum-steps '4294967296' must be a whole number from 1 to 65536" "$mlp" --accum-steps 4294967296
# --keep-last went to the save as an int: 4294967298 kept 2 checkpoints, and removed the others
usage "--keep-last '4294967298' must be a whole number from 0 to 1000000" "$mlp" --keep-last 4294967298
usage "--keep-last '2147483648' must be a whole number from 0 to 1000000" "$resnet" --keep-last 2147483648
usage "--checkpoint-activations '4294967296' must be a whole number from 1 to 1000000" "$mlp" --checkpoint-activations=4294967296
usage "--seed '99999999999999999999' must be a whole number >= 0 (at most 9223372036854775807)" "$mlp" --seed 99999999999999999999
usage "--max-steps '99999999999999999999' must be a whole number >= 1 (at most 9223372036854775807)" "$mlp" --max-steps 99999999999999999999
# digits only, as lockstep-run's -n: a leading space or '+' was taken
usage "--max-steps ' 5' must be a whole number >= 1" "$mlp" --max-steps ' 5'
usage "--epochs '+2' must be a whole number from 0 to 1000000" "$resnet" --epochs +2
usage "--lr 'inf' must be a finite number >= 0" "$mlp" --lr inf
usage "--momentum '1e400' must be a finite number >= 0" "$mlp" --momentum 1e400
# past a float's range, the configs' type: inf in training (a weight decay trained into NaN and an
# eps of inf into updates of 0, both ending in exit 0; an lr was refused by the trainer, exit 1)
usage "--weight-decay '1e39' must be a finite number >= 0 that a float holds (at most 3.4e38)" "$mlp" \
    "${small[@]}" --weight-decay 1e39
usage "--eps '1e39' must be a finite number >= 0 that a float holds" "$resnet" "${small[@]}" --optimizer adamw \
    --eps 1e39
usage "--lr '1e39' must be a finite number >= 0 that a float holds" "$resnet" "${small[@]}" --lr 1e39
usage "--hidden: invalid argument: '1,2,3,4,5,6,7' is not a comma-separated list of 1 to 6 positive sizes" "$mlp" "${small[@]}" --hidden 1,2,3,4,5,6,7
usage "'512,' is not a comma-separated list" "$mlp" "${small[@]}" --hidden 512,
usage "this rank's 100 training samples are fewer than a step's 128 (--batch-size x --accum-steps) under --sampler drop-last" \
    "$mlp" --train-limit 100 --test-limit 100 --sampler drop-last --no-progress
# a step's line that cannot be written (a full disk): a checkpoint of that step is saved and the run
# stops, exit 1 (it stopped without one: the training since the last checkpoint was lost); resumed
# once the file can be written, the file goes on from the next step
d=$(mktemp -d)
for f in --log-steps --metrics; do
    out=$("$mlp" "${small[@]}" --checkpoint-dir "$d/ck$f" "$f" /dev/full 2>&1)
    rc=$?
    [ "$rc" = 1 ] && grep -qxF "fashion_mlp: $f: I/O error: cannot write '/dev/full': No space left on device; saving a checkpoint of step 1 and stopping" <<<"$out" &&
        grep -qF "fashion_mlp: saved checkpoint $d/ck$f/step-00000001 (step 1)" <<<"$out" &&
        grep -qxF "fashion_mlp: $f: I/O error: stopped after step 1, whose line is not in the file; --resume auto continues from $d/ck$f/step-00000001 once the file can be written" <<<"$out" ||
        fail "$f /dev/full: exit $rc: $out"
    out=$("$mlp" "${small[@]}" --checkpoint-dir "$d/ck$f" --resume auto "$f" "$d/steps$f" 2>&1) ||
        fail "$f /dev/full, resumed: $out"
    first='^2 '
    [ "$f" = --log-steps ] || first='^\{"step": 2, '
    grep -qE "$first" "$d/steps$f" && [ "$(wc -l <"$d/steps$f")" = 1 ] ||
        fail "$f /dev/full, resumed: the file: $(cat "$d/steps$f")"
    echo "saved and stopped (1): $f /dev/full"
done
rm -rf "$d"
# --dump-params is written after training: a path that cannot be written is found before it
out=$("$mlp" "${small[@]}" --dump-params /nonexistent-dir/p.bin 2>&1)
[ $? -eq 1 ] || fail "--dump-params /nonexistent-dir/p.bin: not exit 1"
grep -qF -- "--dump-params: I/O error: cannot open '/nonexistent-dir/p.bin' for writing: No such file or directory" \
    <<<"$out" || fail "--dump-params /nonexistent-dir/p.bin: $(tail -n 2 <<<"$out")"
! grep -q '^epoch ' <<<"$out" || fail "--dump-params /nonexistent-dir/p.bin: refused only after training"
echo "refused (1) before training: --dump-params /nonexistent-dir/p.bin"
# a dump that cannot be completed (a file-size limit, as a full disk) keeps the last one whole
# (it was truncated first, then cut short: "short write", no reason); one to /dev/full says why;
# one to a FIFO reaches its reader (the check before training gave the reader its end: a hang)
d=$(mktemp -d)
"$mlp" "${small[@]}" --dump-params "$d/p.bin" >/dev/null 2>&1 || fail "--dump-params $d/p.bin failed"
cp "$d/p.bin" "$d/first.bin"
out=$(trap '' XFSZ; ulimit -f 64; "$mlp" "${small[@]}" --seed 7 --dump-params "$d/p.bin" 2>&1)
[ $? -eq 1 ] && grep -qF -- "--dump-params: I/O error: cannot write '$d/p.bin.tmp': File too large" <<<"$out" ||
    fail "--dump-params past the file-size limit: $(tail -n 2 <<<"$out")"
cmp -s "$d/p.bin" "$d/first.bin" && [ ! -e "$d/p.bin.tmp" ] || fail "--dump-params cut short: the last dump is not whole"
refused "--dump-params: I/O error: cannot write '/dev/full': No space left on device" "$mlp" "${small[@]}" \
    --dump-params /dev/full
mkfifo "$d/fifo"
cat "$d/fifo" >"$d/via.bin" &
timeout 60 "$mlp" "${small[@]}" --dump-params "$d/fifo" >/dev/null 2>&1 || fail "--dump-params to a FIFO failed or hung"
wait
cmp -s "$d/via.bin" "$d/first.bin" || fail "--dump-params to a FIFO: not the dump"
rm -rf "$d"
# the variable named once (it was 'LOCKSTEP_GPU_MONITOR: invalid argument: LOCKSTEP_GPU_MONITOR=...')
refused "fashion_mlp: GPU monitor: invalid argument: LOCKSTEP_GPU_MONITOR='fast': use a sampling interval" \
    env LOCKSTEP_GPU_MONITOR=fast "$mlp" "${small[@]}"
refused "LOCKSTEP_GRAD_COMPRESS=garbage: expected none, fp16 or bf16" env LOCKSTEP_GRAD_COMPRESS=garbage "$mlp" "${small[@]}"
refused "trainer: invalid argument: LOCKSTEP_SHARD_REDUCE='sideways': expected owner" env LOCKSTEP_SHARD_REDUCE=sideways \
    "$mlp" "${small[@]}"
# an empty value is unset, as for every variable (it was refused as not owner or all)
out=$(LOCKSTEP_SHARD_REDUCE= "$mlp" "${small[@]}" 2>&1) || fail "LOCKSTEP_SHARD_REDUCE='': $(tail -n 2 <<<"$out")"
# LOCKSTEP_MALLOC_TUNING: only 0 turned the tuning off; "off" or a typo left it on without a word
refused "LOCKSTEP_MALLOC_TUNING=maybe: expected 0, off or false" env LOCKSTEP_MALLOC_TUNING=maybe "$mlp" "${small[@]}"
refused "LOCKSTEP_MEMORY_LIMIT: memory size '0.5' is not a whole number of bytes" env LOCKSTEP_MEMORY_LIMIT=0.5 "$mlp" "${small[@]}"
refused "LOCKSTEP_MEMORY_LIMIT: memory cap '0.0001KB' is less than a byte" env LOCKSTEP_MEMORY_LIMIT=0.0001KB "$mlp" "${small[@]}"
# a --device or --comm value that means nothing is bad usage (2: it exited 1); oom_challenge named
# a bad --comm "device"
usage "--device: invalid argument: device 'cuda:x' is not one of auto, cpu, cuda, cuda:N" "$mlp" "${small[@]}" --device cuda:x
usage "--comm: invalid argument: backend argument 'foo' is not a communicator backend" "$mlp" "${small[@]}" --comm foo
usage "fashion_resnet: --device: invalid argument: device 'gpu' is not one of" "$resnet" "${small[@]}" --device gpu
usage "fashion_resnet: --comm: invalid argument: backend argument 'foo'" "$resnet" "${small[@]}" --comm foo
usage "oom_challenge: --device: invalid argument: device 'gpu' is not one of" "$oom" --device gpu
usage "oom_challenge: --comm: invalid argument: backend argument 'foo'" "$oom" --comm foo
# an empty value (an unset shell variable) is not the default: --resume '' resumed from the
# latest checkpoint, --device '' chose a device, --dump-params '' failed after the whole run
for f in --device --comm --data-dir --resume --log-steps --metrics --dump-params; do
    usage "fashion_mlp: $f must not be empty (leave the flag out for its default)" "$mlp" "${small[@]}" "$f" ''
done
usage "fashion_resnet: --device must not be empty" "$resnet" --device ''
if [ -n "$bench" ]; then
    usage "bench_mlp: --data-dir '': empty (leave the flag out for its default)" "$bench" --data-dir ''
    usage "bench_mlp: --steps '3x': not a whole number" "$bench" --steps 3x
fi
if [ -n "$bench_ckpt" ]; then
    usage "usage: bench_ckpt save|load|train DIR" "$bench_ckpt" restore /tmp
    usage "bench_ckpt: unknown command 'foo' (save, load or train)" "$bench_ckpt" foo /tmp/x
    usage "bench_ckpt: save: no DIR given" "$bench_ckpt" save
    usage "bench_ckpt: --save-every '-1': " "$bench_ckpt" train /tmp --save-every -1
    refused "bench_ckpt: data: " "$bench_ckpt" train /tmp --hidden 8 --data-dir /nonexistent
    usage "bench_ckpt: DIR is empty" "$bench_ckpt" save ''
    usage "bench_ckpt: --hidden 'x': not a whole number" "$bench_ckpt" save /tmp --hidden 8,x
    refused "bench_ckpt: no checkpoint in '/nonexistent' (run save first)" "$bench_ckpt" load /nonexistent --hidden 8
    usage "bench_ckpt: --hidden '8x0': not a whole number or NxK (N from 1 to 1048576, K from 1 to 4096)" \
        "$bench_ckpt" save /tmp --hidden 8x0
    usage "bench_ckpt: --hidden '8,16x4096': too many layers (up to 4096)" "$bench_ckpt" save /tmp --hidden 8,16x4096
    # an empty entry was skipped (8,,8 ran as 8,8; torch_ckpt.py refused it)
    usage "bench_ckpt: --hidden '8,,8': empty size" "$bench_ckpt" save /tmp --hidden 8,,8
    usage "bench_ckpt: --hidden '8,': empty size" "$bench_ckpt" save /tmp --hidden 8,
    # train's batch against the 60000 samples: 60000 divided by zero (SIGFPE), 65536 stepped on
    # indices past the set ("index 60000 ... is outside"); the whole set is a batch that runs
    usage "bench_ckpt: --batch-size '60001': out of range (a whole number from 1 to 60000, the training samples)" \
        "$bench_ckpt" train /nonexistent --hidden 8 --steps 1 --save-every 0 --batch-size 60001
    out=$("$bench_ckpt" train /nonexistent --hidden 8 --steps 1 --save-every 0 --batch-size 60000 2>&1) &&
        grep -q '"op": "train", .*"saves": 0' <<<"$out" || fail "bench_ckpt train --batch-size 60000: exit $?: $out"
fi
if [ -n "$bench_coll" ]; then
    # sizes below a float printed the headers and no row, exit 0
    usage "bench_collectives: no size from -b/--minbytes 1 to -e/--maxbytes 3 reaches the smallest allreduce message with 1 rank(s), 4 bytes (a float): raise -e/--maxbytes" \
        "$bench_coll" --backend self -b 1 -e 3
fi
# out of memory: the error names where the cap comes from, and remedies that can help: while the
# model is made none depends on the batch (it suggested a smaller batch)
refused "the cap is 20.00 MiB (--memory-cap 20MiB), 18.06 MiB is already in use, the peak so far is 18.06 MiB. The model (its weights, gradients and optimizer state) does not fit whatever the batch: a larger cap, or a smaller model (--widths, --blocks)" \
    "$resnet" "${small[@]}" --widths 512,512,512 --blocks 4 --memory-cap 20MiB
refused "the cap is 20.00 MiB (LOCKSTEP_MEMORY_LIMIT=20MiB), 12.25 MiB is already in use, the peak so far is 12.25 MiB. The model (its weights, gradients and optimizer state) does not fit whatever the batch: a larger cap, or a smaller model (--hidden)" \
    env LOCKSTEP_MEMORY_LIMIT=20MiB "$mlp" "${small[@]}" --hidden 4096,4096
refused "the cap is 20.00 MiB (LOCKSTEP_MEMORY_LIMIT=20MiB), 4.66 MiB is already in use, the peak so far is 4.66 MiB. To fit, try a smaller --batch-size, --precision bf16, or --checkpoint-activations" \
    env LOCKSTEP_MEMORY_LIMIT=20MiB "$mlp" "${small[@]}" --train-limit 8192 --batch-size 8192 --hidden 512
# the remedies named are those the run does not use yet (bf16 was told to use bf16, --batch-size
# auto's run to use --batch-size auto); a batch of 1 that does not fit names a larger cap and a
# smaller model; a model past the search's cap is said so (each trial said "the cap is 2.20 MiB,
# 2.36 MiB is already in use" and "The model ... does not fit whatever the batch")
refused "the peak so far is 17.68 MiB. To fit, try a smaller --batch-size or --checkpoint-activations" \
    env LOCKSTEP_MEMORY_LIMIT=20MiB "$mlp" "${small[@]}" --train-limit 8192 --batch-size 8192 --hidden 512 --precision bf16
refused "not even a batch of 1 per rank trains within 4.50 MiB (the cap 5.00 MiB (--memory-cap 5MiB) less 10% headroom): layer 3 (Residual): layer 0 (Conv2d): out of memory on cpu: cannot allocate 882.00 KiB for convolution workspace; the cap is 4.50 MiB, 3.82 MiB is already in use, the peak so far is 3.82 MiB. To fit, try --precision bf16, --checkpoint-activations, a larger cap, or a smaller model (--widths, --blocks)" \
    "$resnet" "${small[@]}" --widths 32,64,128 --batch-size auto --memory-cap 5MiB
refused "the batch-size search has no room: the model already holds 2.36 MiB, more than the 2.20 MiB it trains within (the cap 2.44 MiB (--memory-cap 2500KiB) less 10% headroom): a larger cap, or a smaller model" \
    "$resnet" "${small[@]}" --widths 32,64,128 --batch-size auto --memory-cap 2500KiB
# --memory-cap wins over LOCKSTEP_MEMORY_LIMIT, also over a bad value there (which stopped the run)
out=$(LOCKSTEP_MEMORY_LIMIT=bogus "$resnet" "${small[@]}" --widths 4,8 --memory-cap 300MiB 2>&1) ||
    fail "fashion_resnet --memory-cap 300MiB with LOCKSTEP_MEMORY_LIMIT=bogus: $out"
# (the challenge itself is not met at this size: exit 1, but the cap is the flag's)
out=$(LOCKSTEP_MEMORY_LIMIT=bogus "$oom" --widths 4,8 --blocks 1 --batch-size 32 --steps 1 --memory-cap 300MiB 2>&1)
grep -q "^oom_challenge: device cpu, 1 rank, cap 300.00 MiB per rank" <<<"$out" ||
    fail "oom_challenge --memory-cap 300MiB with LOCKSTEP_MEMORY_LIMIT=bogus: $out"
# more checkpoint segments than layers is the flag's bad value (fashion_resnet and fashion_mlp
# exited 1, oom_challenge took one segment per layer silently)
usage "fashion_resnet: --checkpoint-activations: invalid argument: cannot split 7 layers into 100 checkpoint segments (at most 7)" \
    "$resnet" "${small[@]}" --widths 4,8 --checkpoint-activations=100
usage "fashion_mlp: --checkpoint-activations: invalid argument: cannot split 5 layers into 9 checkpoint segments (at most 5)" \
    "$mlp" "${small[@]}" --checkpoint-activations=9
usage "fashion_mlp: --checkpoint-activations: invalid argument: cannot split 1 layer into 2 checkpoint segments (at most 1): a single layer keeps no activations between layers to recompute" \
    "$mlp" "${small[@]}" --hidden '' --checkpoint-activations
usage "oom_challenge: --checkpoint-activations: invalid argument: cannot split 11 layers into 99 checkpoint segments (at most 11)" \
    "$oom" --checkpoint-activations=99 --steps 1
# --batch-size auto with no cap to fit in is bad usage (it exited 1, as a failed run)
usage "fashion_resnet: --batch-size auto: invalid argument: the batch-size search needs a memory cap to fit in: set --memory-cap or LOCKSTEP_MEMORY_LIMIT" \
    env -u LOCKSTEP_MEMORY_LIMIT "$resnet" "${small[@]}" --batch-size auto
# the benchmark drivers name a program that is not built (they raised a traceback); they run
# under /usr/bin/python3, which starts faster than a python3 shim (pyenv's: 0.7 s a start)
benchdir=$(cd "$(dirname "$0")/../../cluster/bench" && pwd)
py=python3
[ -x /usr/bin/python3 ] && py=/usr/bin/python3
for d in compare_mlp compare_ddp compare_resnet compare_ema compare_compress compare_shard scaling compare_ckpt; do
    refused "$d: '/nonexistent/" "$py" "$benchdir/$d.py" --build /nonexistent
done
refused "compare_ckpt: '/nonexistent/bench_ckpt' does not exist: build it first" "$py" "$benchdir/compare_ckpt.py" \
    --baseline /nonexistent/bench_ckpt --bench /bin/true
# flag values the drivers ran with, or failed on after the runs: a count of 0 (StatisticsError), a
# thread count 'abc' (taken as OPENBLAS_NUM_THREADS), --torch-threads 0 (labelled 0 threads), a
# --dropout of -1 (ignored), an --ema past bench_mlp's range, zero saves (ZeroDivisionError)
for d in compare_mlp compare_ddp compare_resnet compare_ema compare_compress compare_shard scaling compare_ckpt; do
    usage "$d.py: error: argument --rounds: '0' must be a whole number >= 1" "$py" "$benchdir/$d.py" --rounds 0
done
# and every driver has a --timeout (a hung rank blocked these forever)
for d in compare_mlp compare_ddp compare_resnet scaling; do
    usage "$d.py: error: argument --timeout: 'x' must be a whole number >= 1" "$py" "$benchdir/$d.py" --timeout x
done
usage "argument --rounds: '-1' must be a whole number >= 1" "$py" "$benchdir/compare_ddp.py" --rounds -1
usage "argument --threads: 'abc' must be a whole number >= 1" "$py" "$benchdir/compare_mlp.py" --threads abc
usage "argument --torch-threads: '1,0' must be thread counts of 1 or more" "$py" "$benchdir/compare_mlp.py" \
    --torch-threads 1,0
usage "argument --dropout: '-1' must be a number from 0 to 0.999999" "$py" "$benchdir/compare_mlp.py" --dropout -1
usage "argument --ema: '0.9999999' must be a number from 0 to 0.999999" "$py" "$benchdir/compare_ema.py" \
    --ema 0.9999999
usage "argument --batch-size: '0' must be a whole number >= 1" "$py" "$benchdir/compare_shard.py" --batch-size 0
# scaling.py's --precision is bench_resnet's: with the MLP it was dropped (fp32 figures for a bf16
# request), and a value that is none was found only when the first run failed
usage "scaling.py: error: --precision bf16 is for --model resnet (bench_mlp trains in fp32)" "$py" \
    "$benchdir/scaling.py" --precision bf16 --dry-run
# a SLURM_NTASKS that is no count (a job script's own export): said, not a ValueError traceback
SLURM_NTASKS=4x usage "scaling.py: error: SLURM_NTASKS='4x' is not a count of tasks; give the rank counts with --ranks" \
    "$py" "$benchdir/scaling.py" --dry-run
usage "scaling.py: error: argument --precision: invalid choice: 'fp8'" "$py" "$benchdir/scaling.py" --model resnet \
    --precision fp8 --dry-run
usage "--train-limit 100 must be at least --batch-size x --ranks = 128 (one step of every rank)" \
    "$py" "$benchdir/compare_shard.py" --torch --train-limit 100
usage "--save-every 7 must be from 1 to --steps (6)" "$py" "$benchdir/compare_ckpt.py" --train --steps 6 --save-every 7
usage "--save-every 0 must be from 1 to --steps (35)" "$py" "$benchdir/compare_ckpt.py" --train --save-every 0
usage "--baseline is for save and load; --train does not run it" "$py" "$benchdir/compare_ckpt.py" --train \
    --baseline /bin/true
# a training run past --timeout: said, as for save and load (a TimeoutExpired traceback)
d=$(mktemp -d)
printf '#!/bin/sh\nexec sleep 30\n' >"$d/slow" && chmod +x "$d/slow"
out=$("$py" "$benchdir/compare_ckpt.py" --bench "$d/slow" --train --rounds 1 --timeout 1 2>&1)
rc=$?
[ "$rc" -ne 0 ] && grep -q "^compare_ckpt: $d/slow train .* ran past 1 s$" <<<"$out" && ! grep -q Traceback <<<"$out" ||
    fail "compare_ckpt --train past --timeout: exit $rc: $out"
echo "refused ($rc): compare_ckpt --train, a run past --timeout 1"
# the PyTorch peers check their flags before importing torch: a count of 0 or less (a traceback,
# or with --batch-size 0 "samples/s 0.0" and exit 0), a batch past the training set (it trained on
# the whole set each step and counted the whole batch: a false rate; torch_ckpt's divided by
# zero), an empty size in a list (a ValueError, or skipped), a data directory that is not there (a
# traceback from gzip), a Python without torch (a traceback naming whichever module came first)
mkdir "$d/idx64" "$d/notorch"
"$py" -c 'import gzip, struct, sys; gzip.open(sys.argv[1], "wb").write(struct.pack(">IIII", 0x803, 64, 28, 28))' \
    "$d/idx64/train-images-idx3-ubyte.gz"
echo 'raise ImportError("No module named torch")' >"$d/notorch/torch.py"
usage "torch_mlp.py: error: argument --steps: '0' must be a whole number >= 1" "$py" "$benchdir/torch_mlp.py" --steps 0
usage "torch_mlp.py: error: argument --batch-size: '0' must be a whole number >= 1" "$py" "$benchdir/torch_mlp.py" \
    --batch-size 0
usage "torch_mlp.py: error: --batch-size 65 is more than the 64 training samples" "$py" "$benchdir/torch_mlp.py" \
    --data-dir "$d/idx64" --batch-size 65
usage "torch_mlp.py: error: argument --hidden: '512,' must be sizes of 1 or more" "$py" "$benchdir/torch_mlp.py" \
    --hidden 512,
usage "torch_resnet.py: error: --batch-size 65 is more than the 64 training samples" "$py" \
    "$benchdir/torch_resnet.py" --data-dir "$d/idx64" --batch-size 65
usage "torch_resnet.py: error: argument --widths: '8,x' must be sizes of 1 or more" "$py" "$benchdir/torch_resnet.py" \
    --widths 8,x
usage "torch_ddp_mlp.py: error: argument --ranks: '0' must be a whole number >= 1" "$py" "$benchdir/torch_ddp_mlp.py" \
    --ranks 0
usage "torch_ddp_mlp.py: error: --batch-size 33 is more than a rank's 32 training samples (64 over 2 rank(s))" \
    "$py" "$benchdir/torch_ddp_mlp.py" --data-dir "$d/idx64" --ranks 2 --batch-size 33
usage "torch_ddp_mlp.py: error: argument --hidden: '8,,8' must be sizes of 1 or more" "$py" \
    "$benchdir/torch_ddp_mlp.py" --hidden 8,,8
usage "torch_ckpt.py: error: --batch-size 65 is more than the 64 training samples" "$py" "$benchdir/torch_ckpt.py" \
    train "$d/ck" --data-dir "$d/idx64" --batch-size 65
usage "torch_ckpt.py: error: argument --save-every: '-1' must be a whole number from 0 to 1048576" "$py" \
    "$benchdir/torch_ckpt.py" train "$d/ck" --save-every -1
refused "torch_mlp.py: cannot read '/nonexistent/train-images-idx3-ubyte.gz': No such file or directory" "$py" \
    "$benchdir/torch_mlp.py" --data-dir /nonexistent
# (where numpy is missing too, as on a clean machine, numpy is the module named)
refused "with $py (No module named " env PYTHONPATH="$d/notorch" "$py" "$benchdir/torch_resnet.py" --steps 1
refused "): the PyTorch peers need numpy and torch" \
    env PYTHONPATH="$d/notorch" "$py" "$benchdir/torch_resnet.py" --steps 1
out=$(PYTHONPATH="$d/notorch" "$py" "$benchdir/torch_ddp_mlp.py" --steps 1 2>&1)
[ $? = 1 ] && grep -q "^torch_ddp_mlp.py: cannot import \(torch\|numpy\)" <<<"$out" && ! grep -q Traceback <<<"$out" ||
    fail "torch_ddp_mlp.py without torch: $out"
# timeline_summary: files that are not a trace, named with the problem (a TypeError or KeyError
# traceback, a bare KeyError's 'args', JSON's "Expecting value")
summary=$benchdir/timeline_summary.py
: >"$d/empty.json"
echo '[1,2]' >"$d/ints.json"
printf '[\n{"name":"thread_name","ph":"M","pid":0,"tid":1}\n]\n' >"$d/noargs.json"
printf '[\n{"name":"step 1","ph":"X","pid":0,"ti' >"$d/cut.json"
refused "timeline_summary: $d/empty.json: the file is empty" "$py" "$summary" "$d/empty.json"
refused "timeline_summary: $d/ints.json: not a trace: event 0 is a number, not an object" "$py" "$summary" \
    "$d/ints.json"
refused "timeline_summary: $d/noargs.json: event 0 (ph M, \"thread_name\") has no args.name" "$py" "$summary" \
    "$d/noargs.json"
refused "timeline_summary: $d/cut.json: holds no complete event: it is cut short inside its first" "$py" "$summary" \
    "$d/cut.json"
refused "timeline_summary: $d/missing.json: No such file or directory" "$py" "$summary" "$d/missing.json"
rm -rf "$d"
usage "oom_challenge: --comm must not be empty" "$oom" --comm ''
# an MPI setting that meant "on" for any value but 0 (MPI as a singleton: one rank, no launcher)
out=$("$mlp" "${small[@]}" --comm mpi 2>&1)
if ! grep -q "has no MPI" <<<"$out"; then
    refused "LOCKSTEP_MPI_CUDA_AWARE=maybe: expected 1 or on" env LOCKSTEP_MPI_CUDA_AWARE=maybe "$mlp" "${small[@]}" --comm mpi
fi
usage "--widths '4,' is not a comma-separated list" "$resnet" --widths 4,
usage "fashion_resnet: --dropout '1' must be a number from 0 to below 1" "$resnet" --dropout 1
usage "--precision: invalid argument:" "$mlp" --precision fp8
usage "--optimizer: invalid argument:" "$resnet" --optimizer adam
usage "--precision: invalid argument: the remedy is bf16 or fp16, not fp32" "$oom" --precision fp32
usage "quickstart: an empty value for '--checkpoint-dir'" "$qs" --checkpoint-dir ''
usage "usage: quickstart [--epochs N]" "$qs" --checkpoint-dir ''
usage "quickstart: unknown argument '--epochs=3'" "$qs" --epochs=3
usage "quickstart: no value for '--batch-size'" "$qs" --batch-size
out=$("$qs" --help) && grep -q "^usage: quickstart" <<<"$out" || fail "quickstart --help: $out"
usage "--blocks '2147483648' must be a whole number from 1 to 1024" "$resnet" --blocks 2147483648
usage "--memory-cap: invalid argument: memory cap '0' is less than a byte" "$resnet" --train-limit 64 --test-limit 64 --memory-cap 0
usage "--steps '4294967296' must be a whole number from 1 to 1000000" "$oom" --steps 4294967296
usage "--small-batch 1000 must be smaller than --batch-size 64" "$oom" --small-batch 1000 --batch-size 64
usage "--image-size '4294967296' must be a whole number from 1 to 4096" "$oom" --image-size 4294967296

# IDX files of 14 x 14 images load; the examples' models take 28 x 28: refused at loading, not at the
# first step
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
# a checkpoint directory that cannot be written: found at the start, not at the first save after
# the epochs it was to keep (a file, a directory under a file, a path too long)
: >"$d/afile"
for ck in "$d/afile" "$d/afile/sub" "$d/$(printf 'x%.0s' $(seq 1100))"; do
    out=$("$mlp" --train-limit 256 --test-limit 100 --epochs 2 --no-progress --save-every 4 --checkpoint-dir "$ck" 2>&1)
    [ $? -eq 1 ] || fail "--checkpoint-dir ${ck:0:60}: not exit 1: $(tail -n 1 <<<"$out")"
    grep -qF -- "fashion_mlp: --checkpoint-dir: " <<<"$out" || fail "--checkpoint-dir ${ck:0:60}: $(tail -n 1 <<<"$out")"
    ! grep -q '^epoch ' <<<"$out" || fail "--checkpoint-dir ${ck:0:60}: refused only after training"
done
grep -qF "fashion_mlp: --checkpoint-dir: invalid argument: checkpoint directory '$d/xxx" <<<"$out" ||
    fail "a long --checkpoint-dir: $out"
refused "fashion_resnet: --checkpoint-dir: I/O error: '$d/afile' is not a directory" "$resnet" "${small[@]}" \
    --save-every 1 --checkpoint-dir "$d/afile"
echo "refused (1) before training: --checkpoint-dir a file, under a file, too long"
python3 - "$d" <<'PY'
import gzip, struct, sys
for name, n in (("train", 64), ("t10k", 32)):
    with gzip.open("%s/%s-images-idx3-ubyte.gz" % (sys.argv[1], name), "wb") as f:
        f.write(struct.pack(">IIII", 0x803, n, 14, 14) + bytes(n * 196))
    with gzip.open("%s/%s-labels-idx1-ubyte.gz" % (sys.argv[1], name), "wb") as f:
        f.write(struct.pack(">II", 0x801, n) + bytes(i % 10 for i in range(n)))
PY
refused "data: bad format: the training images have 196 pixels, not Fashion-MNIST's 28 x 28 = 784" \
    "$mlp" "${small[@]}" --data-dir "$d"
refused "the training images have 196 pixels" "$resnet" --data-dir "$d"
# 14 x 56 images have 784 pixels: refused too (the ResNet trained on them as 28 x 28)
python3 - "$d" <<'PY'
import gzip, struct, sys
with gzip.open("%s/train-images-idx3-ubyte.gz" % sys.argv[1], "wb") as f:
    f.write(struct.pack(">IIII", 0x803, 64, 14, 56) + bytes(64 * 784))
PY
refused "data: bad format: the training images are 14 x 56, not Fashion-MNIST's 28 x 28" "$resnet" --data-dir "$d"

# a trace that cannot be written is said once, at the first step's flush (it was said at exit
# only, after the run's lines), and the run itself is fine
out=$(LOCKSTEP_TIMELINE=/dev/full "$mlp" "${small[@]}" 2>&1) || fail "LOCKSTEP_TIMELINE=/dev/full: $out"
[ "$(grep -cF "timeline: writing '/dev/full' failed: No space left on device; the trace stops here (the run goes on)" <<<"$out")" = 1 ] ||
    fail "a lost timeline not said once: $out"
[ "$(grep -nE "timeline: writing|^epoch 1 " <<<"$out" | head -n 1 | grep -c timeline)" = 1 ] ||
    fail "the lost timeline said after the epoch line: $out"
# no hidden layer: 784 x 10 + 10 parameters
out=$("$mlp" "${small[@]}" --hidden '' 2>&1) || fail "--hidden '': $out"
grep -q ' 7850 parameters' <<<"$out" || fail "--hidden '' is not a linear model: $(head -n 1 <<<"$out")"
# the data set kept on the device, out of memory: the remedies for that (they were the training
# step's: a smaller --batch-size, bf16, checkpointing, none of which helps)
out=$(LOCKSTEP_DATA_ON_DEVICE=on LOCKSTEP_MEMORY_LIMIT=12MiB "$mlp" --train-limit 10000 --test-limit 100 --max-steps 1 \
    --no-progress 2>&1)
grep -qF "for data set on the device (LOCKSTEP_DATA_ON_DEVICE); the cap is 12.00 MiB" <<<"$out" &&
    grep -qF "LOCKSTEP_DATA_ON_DEVICE=on keeps the whole data set on the device: auto or off keeps it on the host" \
        <<<"$out" && ! grep -q -- "--batch-size" <<<"$out" || fail "the data set out of memory: $out"
# a checkpoint directory on a file system with less room than a checkpoint: refused before the
# training (it failed at the first save, "No space left on device"); a 1 MB tmpfs in a mount
# namespace of its own, where this runs as root (another user: in a user namespace of its own)
d=$(mktemp -d)
mkdir "$d/small"
ns=()
if [ "$(id -u)" = 0 ] && unshare -m true 2>/dev/null; then
    ns=(unshare -m)
elif unshare -r -m true 2>/dev/null; then
    ns=(unshare -r -m)
fi
if [ ${#ns[@]} -gt 0 ]; then
    out=$("${ns[@]}" sh -c 'mount -t tmpfs -o size=1M tmpfs "$1" && shift && exec "$@"' sh "$d/small" \
        "$mlp" "${small[@]}" --save-every 1 --checkpoint-dir "$d/small/ck" 2>&1)
    rc=$?
    [ "$rc" = 1 ] && grep -qE -- "--checkpoint-dir: I/O error: '$d/small/ck': 1\.0 MB free on its file system, a checkpoint of this run takes about [0-9.]+ MB" <<<"$out" &&
        ! grep -q '^epoch ' <<<"$out" || fail "a checkpoint directory without room: exit $rc: $out"
    echo "refused (1) before training: --checkpoint-dir on a full file system"
else
    echo "skipped: a full file system (needs mount namespaces, as root or in a user namespace)"
fi
rm -rf "$d"
# stdout that cannot be written: exit 1, said (to /dev/full the run exited 0 without its lines)
out=$("$mlp" "${small[@]}" 2>&1 >/dev/full)
rc=$?
[ "$rc" = 1 ] && grep -qF "fashion_mlp: cannot write the output (stdout)" <<<"$out" ||
    fail "stdout to /dev/full: exit status $rc: $out"
# --help to a stdout that cannot be written: exit 1, said (it exited 0), as lockstep-run's
for p in "$mlp" "$resnet" "$oom"; do
    out=$("$p" --help 2>&1 >/dev/full)
    rc=$?
    [ "$rc" = 1 ] && grep -qF "$(basename "$p"): cannot write the output (stdout)" <<<"$out" ||
        fail "$(basename "$p") --help to /dev/full: exit status $rc: $out"
done
# stdout closed: no file the run writes is its fd 1 (the epoch lines went into --metrics, with
# --save-async into the checkpoint's files, and into the timeline)
d=$(mktemp -d)
LOCKSTEP_TIMELINE=$d/t.json "$mlp" "${small[@]}" --max-steps 4 --save-every 2 --save-async --checkpoint-dir "$d/ck" \
    --metrics "$d/m.jsonl" >&- 2>"$d/err" || fail "stdout closed: $(cat "$d/err")"
python3 -c 'import json, sys
[json.loads(l) for l in open(sys.argv[1])]
json.load(open(sys.argv[2]))' "$d/m.jsonl" "$d/t.json" ||
    fail "stdout closed: --metrics or the timeline holds more than its JSON: $(head -c 300 "$d/m.jsonl")"
out=$("$mlp" "${small[@]}" --max-steps 4 --checkpoint-dir "$d/ck" --resume auto 2>&1)
grep -q "nothing to train (step 4 has reached --max-steps)" <<<"$out" && ! grep -q damaged <<<"$out" ||
    fail "stdout closed: the checkpoints are not whole: $out"
rm -rf "$d"

# a second run saving into a directory another run holds (its .lock) is refused at its start,
# naming the holder (two runs pruned and overwrote each other's checkpoints without a word)
d=$(mktemp -d)
mkdir "$d/held"
(
    exec 9>>"$d/held/.lock"
    flock 9
    echo "pid 1 on elsewhere" >&9
    : >"$d/go"
    exec sleep 30
) &
holder=$!
for ((i = 0; i < 100; i++)); do [ -e "$d/go" ] && break; sleep 0.05; done
out=$("$mlp" "${small[@]}" --save-every 1 --checkpoint-dir "$d/held" 2>&1)
rc=$?
kill "$holder"
wait "$holder" 2>/dev/null
[ "$rc" = 1 ] || fail "a held --checkpoint-dir: exit $rc, expected 1: $out"
grep -qF "fashion_mlp: --checkpoint-dir: I/O error: checkpoint directory '$d/held' is in use by another run (pid 1 on elsewhere holds $d/held/.lock)" <<<"$out" ||
    fail "a held --checkpoint-dir: $out"
[ -z "$(ls "$d/held")" ] || fail "a held --checkpoint-dir: the second run wrote into it: $(ls "$d/held")"
# once the holder is gone the directory is free
"$mlp" "${small[@]}" --save-every 1 --checkpoint-dir "$d/held" >/dev/null 2>&1 || fail "a freed --checkpoint-dir: refused"
rm -rf "$d"
# the directory removed while the run goes on: its next save takes the lock again (it made the
# directory afresh, unlocked: a second run started then took the lock, and both saved there,
# replacing and pruning each other's checkpoints); where a second run holds it by then, the run
# stops at that save, naming the holder, and writes nothing there. The run pauses on its step log,
# a FIFO of 4 KiB not read: after the save of step 2000 (its line 2001 read), before that of 4000.
d=$(mktemp -d)
for holder in none other; do
    python3 - "$mlp" "$d" "$holder" <<'PY' || fail "the --checkpoint-dir removed during the run ($holder)"
import fcntl, os, select, shutil, subprocess, sys
mlp, d, holder = sys.argv[1:]
ck, log = d + "/ck", d + "/log"
shutil.rmtree(ck, ignore_errors=True)
if not os.path.exists(log):
    os.mkfifo(log)
fifo = os.open(log, os.O_RDWR)  # the pipe exists now: its size is set before the run writes
fcntl.fcntl(fifo, 1031, 4096)  # F_SETPIPE_SZ
run = subprocess.Popen([mlp, "--train-limit", "5000", "--test-limit", "100", "--batch-size", "1", "--hidden", "",
                        "--max-steps", "4500", "--no-progress", "--save-every", "2000", "--keep-last", "0",
                        "--checkpoint-dir", ck, "--log-steps", log], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
def drain(until):  # read the log (the run blocks when 4 KiB wait) until until(what was read) or the run ends
    seen = b""
    while not until(seen) and run.poll() is None:
        if select.select([fifo], [], [], 0.05)[0]:
            seen = seen[-16:] + os.read(fifo, 4096)
    return until(seen)
if not drain(lambda seen: b"\n2001 " in seen):
    sys.exit("the run ended before its step 2001: %s" % run.stdout.read().decode())
shutil.rmtree(ck)
held = None
if holder == "other":
    os.mkdir(ck)
    held = open(ck + "/.lock", "w")
    fcntl.flock(held, fcntl.LOCK_EX)
    held.write("pid 1 on elsewhere\n")
    held.flush()
drain(lambda seen: False)
out = run.stdout.read().decode()
left = sorted(os.listdir(ck))
warned = "'%s/.lock' is no longer the lock this run holds (the checkpoint directory was removed or replaced " \
         "while it ran): taking it again" % ck
if holder == "none":
    ok = run.returncode == 0 and warned in out and left == [".lock", "latest", "step-00004000", "step-00004500"]
else:
    ok = run.returncode == 1 and left == [".lock"] and (
        "fashion_mlp: checkpoint: I/O error: checkpoint directory '%s' was removed or replaced while this run held "
        "it: checkpoint directory '%s' is in use by another run (pid 1 on elsewhere holds %s/.lock)" % (ck, ck, ck)) in out
if not ok:
    print("exit %d, %s left, output:\n%s" % (run.returncode, left, out))
sys.exit(0 if ok else 1)
PY
done
rm -rf "$d"
echo "PASS: bad flags, variables and files refused, naming what and why"

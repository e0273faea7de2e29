#!/usr/bin/env bash
# check_cli_errors.sh MLP RESNET OOM: bad input to the example programs is refused with an error that
# names the flag or variable and the problem (exit status not 0), where it used to be cut to an
# int, saturated, ignored or trained into NaN: counts past their range (2^32 epochs trained
# nothing; a batch of 2^62 x 2 accumulation steps overflowed to 0 steps an epoch), non-finite
# numbers (--lr inf), 7 or more hidden layers (the extra ones were dropped), a trailing comma,
# drop-last with no whole batch (an epoch of no steps, a NaN loss), files that cannot be written
# (/dev/full), a gradient-compression setting on one rank (checked only with two), a memory cap of
# 0 (meant no cap), LOCKSTEP_MPI_CUDA_AWARE=maybe (meant on), 14 x 14 images (failed at the first
# step, naming no file). And an empty --hidden trains a linear model, as --help says.
set -u
mlp=$1 resnet=$2 oom=$3
export LOCKSTEP_DEVICE=cpu OPENBLAS_NUM_THREADS=1
small=(--train-limit 256 --test-limit 100 --max-steps 2 --no-progress)
fail() {
    echo "FAIL: $*"
    exit 1
}
# refused WANT PROG ARGS...: PROG fails, and its output holds WANT
refused() {
    local want=$1 out rc
    shift
    out=$("$@" 2>&1)
    rc=$?
    [ "$rc" -ne 0 ] || fail "accepted (exit 0): $*: $(tail -n 2 <<<"$out")"
    grep -qF -- "$want" <<<"$out" || fail "$*: exit $rc without '$want': $(tail -n 3 <<<"$out")"
    echo "refused: ${*:2}"
}

refused "--epochs '4294967296' must be a whole number from 0 to 1000000" "$mlp" "${small[@]}" --epochs 4294967296
refused "--epochs '99999999999999999999' must be a whole number from 0 to 1000000" "$mlp" --epochs 99999999999999999999
refused "--batch-size '4611686018427387904' must be a whole number from 1 to 16777216" "$mlp" --batch-size 4611686018427387904 --accum-steps 2
refused "--accum-steps '4294967296' must be a whole number from 1 to 65536" "$mlp" --accum-steps 4294967296
refused "--checkpoint-activations '4294967296' must be a whole number from 1 to 1000000" "$mlp" --checkpoint-activations=4294967296
refused "--seed '99999999999999999999' must be a whole number >= 0" "$mlp" --seed 99999999999999999999
refused "--max-steps '99999999999999999999' must be a whole number >= 1" "$mlp" --max-steps 99999999999999999999
refused "--lr 'inf' must be a finite number >= 0" "$mlp" --lr inf
refused "--momentum '1e400' must be a finite number >= 0" "$mlp" --momentum 1e400
refused "--hidden: invalid argument: '1,2,3,4,5,6,7' is not a comma-separated list of 1 to 6 positive sizes" "$mlp" "${small[@]}" --hidden 1,2,3,4,5,6,7
refused "'512,' is not a comma-separated list" "$mlp" "${small[@]}" --hidden 512,
refused "this rank's 100 training samples are fewer than a step's 128 (--batch-size x --accum-steps) under --sampler drop-last" \
    "$mlp" --train-limit 100 --test-limit 100 --sampler drop-last --no-progress
refused "--log-steps: I/O error: cannot write '/dev/full': No space left on device" "$mlp" "${small[@]}" --log-steps /dev/full
refused "--metrics: I/O error: cannot write '/dev/full': No space left on device" "$mlp" "${small[@]}" --metrics /dev/full
refused "LOCKSTEP_GRAD_COMPRESS=garbage: expected none, fp16 or bf16" env LOCKSTEP_GRAD_COMPRESS=garbage "$mlp" "${small[@]}"
refused "LOCKSTEP_MEMORY_LIMIT: memory cap '0.5' is less than a byte" env LOCKSTEP_MEMORY_LIMIT=0.5 "$mlp" "${small[@]}"
refused "--device: invalid argument: device 'cuda:x' is not one of cpu, cuda, cuda:N" "$mlp" "${small[@]}" --device cuda:x
refused "--comm: invalid argument: backend argument 'foo' is not a communicator backend" "$mlp" "${small[@]}" --comm foo
# an MPI setting that meant "on" for any value but 0 (MPI as a singleton: one rank, no launcher)
out=$("$mlp" "${small[@]}" --comm mpi 2>&1)
if ! grep -q "has no MPI" <<<"$out"; then
    refused "LOCKSTEP_MPI_CUDA_AWARE=maybe: expected 1 or on" env LOCKSTEP_MPI_CUDA_AWARE=maybe "$mlp" "${small[@]}" --comm mpi
fi
refused "--widths '4,' is not a comma-separated list" "$resnet" --widths 4,
refused "--blocks '2147483648' must be a whole number from 1 to 1024" "$resnet" --blocks 2147483648
refused "--memory-cap: invalid argument: memory cap '0' is less than a byte" "$resnet" --train-limit 64 --test-limit 64 --memory-cap 0
refused "--steps '4294967296' must be a whole number from 1 to 1000000" "$oom" --steps 4294967296
refused "--small-batch 1000 must be smaller than --batch-size 64" "$oom" --small-batch 1000 --batch-size 64
refused "--image-size '4294967296' must be a whole number from 1 to 4096" "$oom" --image-size 4294967296

# IDX files of 14 x 14 images load; the examples' models take 28 x 28: refused at loading, not at the
# first step
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
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

# a trace that cannot be written is said at exit (the run itself is fine)
out=$(LOCKSTEP_TIMELINE=/dev/full "$mlp" "${small[@]}" 2>&1) || fail "LOCKSTEP_TIMELINE=/dev/full: $out"
grep -qF "timeline: writing '/dev/full' failed: No space left on device" <<<"$out" || fail "a lost timeline unsaid: $out"
# no hidden layer: 784 x 10 + 10 parameters
out=$("$mlp" "${small[@]}" --hidden '' 2>&1) || fail "--hidden '': $out"
grep -q ' 7850 parameters' <<<"$out" || fail "--hidden '' is not a linear model: $(head -n 1 <<<"$out")"
echo "PASS: bad flags, variables and files refused, naming what and why"

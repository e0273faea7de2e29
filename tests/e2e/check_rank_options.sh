#!/usr/bin/env bash
# check_rank_options.sh MLP RESNET OOM MPIRUN SLOW: 2 ranks started with different options (mpirun's
# MPMD form, "-np 1 PROG A : -np 1 PROG B") fail at start, exit status 1, both ranks printing the
# same line that names the option and both values, within the 60 s this script allows each run:
# before, other --epochs or --save-every waited in a collective until LOCKSTEP_COMM_TIMEOUT (30
# minutes), a smaller training set (or another oom_challenge --memory-cap) failed in MPI_Allreduce
# with MPI_ERR_TRUNCATE (rank 0 then crashed), and another --seed or --lr
# trained silently apart; a --data-dir whose files differ (one test label) is found by the data sets'
# CRC32. Options only rank 0 uses (--checkpoint-dir, --log-steps, --metrics) may differ, or be
# given to one rank only.
MLP=$1 RESNET=$2 OOM=$3 MPIRUN=$4 SLOW=$5
set -u
tmp=$(mktemp -d /tmp/ls_rank_opts.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp" || exit 1
export OPENBLAS_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fail() { echo "FAIL: $*"; echo "--- last output:"; tail -n 30 "$tmp/out" 2>/dev/null; exit 1; }

# two PROG ARGS0 -- ARGS1: rank 0 with ARGS0, rank 1 with ARGS1
two() {
    local prog=$1; shift
    local a=() b=()
    while [ "$1" != -- ]; do a+=("$1"); shift; done
    shift
    b=("$@")
    timeout 60 "$MPIRUN" --oversubscribe --bind-to none -np 1 "$prog" "${a[@]}" : -np 1 "$prog" "${b[@]}" \
        >"$tmp/out" 2>&1
    rc=$?
}
# mismatch PROG 'LINE' ARGS0 -- ARGS1: exit 1, LINE printed by both ranks
mismatch() {
    local prog=$1 line=$2; shift 2
    two "$prog" "$@"
    [ "$rc" -ne 124 ] || fail "$(basename "$prog") $*: still running after 60 s"
    [ "$rc" -eq 1 ] || fail "$(basename "$prog") $*: exit status $rc, expected 1"
    local n
    n=$(grep -cxF -- "$line" "$tmp/out")
    [ "$n" -eq 2 ] || fail "$(basename "$prog") $*: '$line' printed $n times, expected 2 (one per rank)"
    echo "ok: $line"
}
# mismatch_bg ARGS...: mismatch in the background, in a directory of its own (its output there),
# two at a time (the test holds both cores; a run is mostly mpirun's start and the data's load);
# mismatch_wait: waits for them, printing what each printed, and fails if one did
bg=()
mismatch_wait() {
    local j bad=0
    for j in "${bg[@]}"; do
        wait "${j%%:*}" || bad=1
        cat "${j#*:}/log"
    done
    bg=()
    [ "$bad" = 0 ] || { echo "FAIL: a mismatch run above failed"; exit 1; }
}
mismatch_bg() {
    [ "${#bg[@]}" -lt 2 ] || mismatch_wait
    local d
    d=$(mktemp -d "$tmp/bg.XXXXXX")
    (
        tmp=$d
        cd "$d" && mismatch "$@"
    ) >"$d/log" 2>&1 &
    bg+=("$!:$d")
}

M=(--epochs 1 --train-limit 1000 --test-limit 200 --no-progress)
P="fashion_mlp: options: mismatch between ranks:"
mismatch_bg "$MLP" "$P --epochs is 2 on rank 1 but 1 on rank 0" "${M[@]}" -- "${M[@]}" --epochs 2
mismatch_bg "$MLP" "$P the training set's size (--train-limit, --data-dir) is 1500 on rank 1 but 1000 on rank 0" \
    "${M[@]}" -- "${M[@]}" --train-limit 1500
mismatch_bg "$MLP" "$P the test set's size (--test-limit, --data-dir) is 100 on rank 1 but 200 on rank 0" \
    "${M[@]}" -- "${M[@]}" --test-limit 100
mismatch_bg "$MLP" "$P --seed is 7 on rank 1 but 42 on rank 0" "${M[@]}" -- "${M[@]}" --seed 7
mismatch_bg "$MLP" "$P --lr is 0.1 on rank 1 but not given on rank 0" "${M[@]}" -- "${M[@]}" --lr 0.1
mismatch_bg "$MLP" "$P --save-every is 3 on rank 1 but 0 on rank 0" "${M[@]}" -- "${M[@]}" --save-every 3
mismatch_bg "$MLP" "$P --resume is 'auto' on rank 1 but not given on rank 0" "${M[@]}" -- "${M[@]}" --resume auto
mismatch_bg "$MLP" "$P --shard-optimizer is not given on rank 1 but given on rank 0" \
    "${M[@]}" --shard-optimizer -- "${M[@]}"
mismatch_bg "$MLP" "$P --hidden is '64' on rank 1 but '512,256' on rank 0" "${M[@]}" -- "${M[@]}" --hidden 64
mismatch_wait

# a rank slow to print (SLOW, given to rank 1 only: its error line 2 s late) still prints: the ranks, which all know
# of the mismatch, exit 1 together rather than rank 0 stopping the job (MPI_Abort) first (before,
# under load, rank 1's line was sometimes lost)
for prog in "$MLP" "$OOM"; do
    if [ "$prog" = "$MLP" ]; then
        args=("${M[@]}") line="fashion_mlp: options: mismatch between ranks: --epochs is 2 on rank 1 but 1 on rank 0"
    else
        args=(--widths 4,8 --blocks 1 --batch-size 32 --memory-cap 4MiB)
        line="oom_challenge: options: mismatch between ranks: --steps is 3 on rank 1 but 2 on rank 0"
    fi
    extra=(--epochs 2)
    [ "$prog" = "$MLP" ] || extra=(--steps 3)
    timeout 60 "$MPIRUN" --oversubscribe --bind-to none -np 1 "$prog" "${args[@]}" : \
        -np 1 -x LD_PRELOAD="$SLOW" "$prog" "${args[@]}" "${extra[@]}" >"$tmp/out" 2>&1
    rc=$?
    [ "$rc" -eq 1 ] || fail "$(basename "$prog"), rank 1 slow to print: exit status $rc, expected 1"
    n=$(grep -cxF -- "$line" "$tmp/out")
    [ "$n" -eq 2 ] || fail "$(basename "$prog"), rank 1 slow to print: '$line' printed $n times, expected 2"
    echo "ok (rank 1 slow to print): $line"
done
# the trainer's own check of the ranks' settings, also known to every rank
timeout 60 "$MPIRUN" --oversubscribe --bind-to none -np 1 "$MLP" "${M[@]}" --shard-optimizer : \
    -np 1 -x LOCKSTEP_SHARD_REDUCE=all -x LD_PRELOAD="$SLOW" "$MLP" "${M[@]}" --shard-optimizer >"$tmp/out" 2>&1
rc=$?
[ "$rc" -eq 1 ] || fail "LOCKSTEP_SHARD_REDUCE=all on rank 1 only, slow to print: exit status $rc, expected 1"
[ "$(grep -c "^fashion_mlp: trainer: mismatch between ranks: the sharded optimizer's" "$tmp/out")" -eq 2 ] ||
    fail "LOCKSTEP_SHARD_REDUCE=all on rank 1 only, slow to print: the trainer's mismatch not printed by both ranks"
echo "ok (rank 1 slow to print): the trainer's mismatch"

# the same sizes read from other files (another host's --data-dir): one test label changed
src=${LOCKSTEP_FASHION_DIR:-/usr/share/datasets/fashion-mnist}
mkdir other && cp "$src"/*-ubyte.gz other/ || fail "cannot copy the data set from $src"
python3 - other/t10k-labels-idx1-ubyte.gz <<'PY' || fail "cannot rewrite other/t10k-labels-idx1-ubyte.gz"
import gzip, sys
b = bytearray(gzip.open(sys.argv[1]).read())
b[8] = (b[8] + 1) % 10  # the first label
with gzip.open(sys.argv[1], "wb") as f:
    f.write(b)
PY
two "$MLP" "${M[@]}" -- "${M[@]}" --data-dir other
[ "$rc" -eq 1 ] || fail "--data-dir with one other label on rank 1: exit status $rc, expected 1"
line="fashion_mlp: options: mismatch between ranks: the test set's CRC32 \\(its files in --data-dir\\) is [0-9]+ on rank 1 but [0-9]+ on rank 0"
[ "$(grep -cxE -- "$line" "$tmp/out")" -eq 2 ] || fail "--data-dir with one other label on rank 1: no '$line' from both ranks"
echo "ok: $(grep -m1 -xE -- "$line" "$tmp/out")"

R=(--epochs 1 --train-limit 256 --test-limit 128 --widths 4,8,8 --no-progress)
P="fashion_resnet: options: mismatch between ranks:"
mismatch_bg "$RESNET" "$P --sync-bn is given on rank 1 but not given on rank 0" "${R[@]}" -- "${R[@]}" --sync-bn
mismatch_bg "$RESNET" "$P --batch-size is 'auto' on rank 1 but 64 on rank 0" "${R[@]}" -- "${R[@]}" --batch-size auto
mismatch_wait

O=(--widths 4,8 --blocks 1 --batch-size 32 --memory-cap 4MiB)
P="oom_challenge: options: mismatch between ranks:"
mismatch "$OOM" "$P the cap is '--memory-cap 64MiB' on rank 1 but '--memory-cap 4MiB' on rank 0" \
    "${O[@]}" -- "${O[@]}" --memory-cap 64MiB
# a cap from LOCKSTEP_MEMORY_LIMIT on one rank and the default on the other: where each comes from
# (it was "--memory-cap (bytes) is 67108864 on rank 1 but 402653184 on rank 0", given to neither)
O2=(--widths 4,8 --blocks 1 --batch-size 32)
timeout 60 "$MPIRUN" --oversubscribe --bind-to none -np 1 "$OOM" "${O2[@]}" : \
    -np 1 -x LOCKSTEP_MEMORY_LIMIT=64MiB "$OOM" "${O2[@]}" >"$tmp/out" 2>&1
rc=$?
[ "$rc" -eq 1 ] || fail "oom_challenge, LOCKSTEP_MEMORY_LIMIT=64MiB on rank 1 only: exit status $rc, expected 1"
line="$P the cap is 'LOCKSTEP_MEMORY_LIMIT=64MiB' on rank 1 but 'the default 384MiB' on rank 0"
[ "$(grep -cxF -- "$line" "$tmp/out")" -eq 2 ] ||
    fail "oom_challenge, LOCKSTEP_MEMORY_LIMIT=64MiB on rank 1 only: '$line' not printed by both ranks"
echo "ok: $line"
# the same cap given two ways is the same cap: the run goes on (the challenge is not met at this size)
timeout 60 "$MPIRUN" --oversubscribe --bind-to none -np 1 "$OOM" "${O2[@]}" --steps 1 --memory-cap 64MiB : \
    -np 1 -x LOCKSTEP_MEMORY_LIMIT=65536KiB "$OOM" "${O2[@]}" --steps 1 >"$tmp/out" 2>&1
grep -q "^oom_challenge: device cpu, 2 ranks, cap 64.00 MiB per rank" "$tmp/out" ||
    fail "oom_challenge, --memory-cap 64MiB and LOCKSTEP_MEMORY_LIMIT=65536KiB: not run under the one cap"
grep -q "mismatch" "$tmp/out" && fail "oom_challenge, --memory-cap 64MiB and LOCKSTEP_MEMORY_LIMIT=65536KiB: a mismatch"
mismatch "$OOM" "$P --steps is 3 on rank 1 but 2 on rank 0" "${O[@]}" -- "${O[@]}" --steps 3

# the trainer's own check, reached through the environment: the sharded optimizer's gradients
# reduced to owners on rank 0, all-reduced on rank 1
timeout 60 "$MPIRUN" --oversubscribe --bind-to none -np 1 "$MLP" "${M[@]}" --shard-optimizer : \
    -np 1 -x LOCKSTEP_SHARD_REDUCE=all "$MLP" "${M[@]}" --shard-optimizer >"$tmp/out" 2>&1
rc=$?
[ "$rc" -eq 1 ] || fail "LOCKSTEP_SHARD_REDUCE=all on rank 1 only: exit status $rc, expected 1"
line="fashion_mlp: trainer: mismatch between ranks: the sharded optimizer's gradient reduction (shard_reduce, LOCKSTEP_SHARD_REDUCE) is 'all' on rank 1 but 'owner' on rank 0"
[ "$(grep -cxF -- "$line" "$tmp/out")" -eq 2 ] || fail "LOCKSTEP_SHARD_REDUCE=all on rank 1 only: '$line' not printed by both ranks"
echo "ok: $line"

# what only rank 0 uses may differ: the run trains
two "$MLP" "${M[@]}" --checkpoint-dir A --log-steps a.txt -- "${M[@]}" --checkpoint-dir B --log-steps b.txt
[ "$rc" -eq 0 ] || fail "--checkpoint-dir and --log-steps differing on rank 1: exit status $rc, expected 0"
grep -q '^epoch 1 ' "$tmp/out" || fail "--checkpoint-dir and --log-steps differing on rank 1: no epoch line"
[ "$(wc -l <a.txt)" -eq 4 ] || fail "rank 0's --log-steps a.txt has $(wc -l <a.txt) lines, expected 4 steps"
[ ! -e b.txt ] || fail "rank 1 wrote its --log-steps file"
mv a.txt both.txt
# or be given to rank 0 alone (or to rank 1 alone, where it does nothing): the loss and the metrics
# are summed over every rank, so every rank takes part where rank 0 writes (a rank 0 alone with
# --log-steps or --metrics met the others' next collective: MPI_ERR_TRUNCATE)
rm -f a.txt m.json
two "$MLP" "${M[@]}" --log-steps a.txt --metrics m.json -- "${M[@]}"
[ "$rc" -eq 0 ] || fail "--log-steps and --metrics on rank 0 only: exit status $rc, expected 0"
[ "$(wc -l <a.txt)" -eq 4 ] && [ "$(wc -l <m.json)" -eq 4 ] || fail "rank 0 alone: not 4 lines of each"
# --log-steps alone on rank 0: the same losses, of the global batch (rank 1 without the flag added
# none: the file held rank 0's own)
rm -f a.txt
two "$MLP" "${M[@]}" --log-steps a.txt -- "${M[@]}"
[ "$rc" -eq 0 ] || fail "--log-steps on rank 0 only: exit status $rc, expected 0"
cmp -s a.txt both.txt || fail "--log-steps on rank 0 alone: not the losses of the run where both ranks had it: $(paste a.txt both.txt)"
two "$RESNET" "${R[@]}" -- "${R[@]}" --metrics b.json --log-steps b.txt
[ "$rc" -eq 0 ] || fail "fashion_resnet: --metrics and --log-steps on rank 1 only: exit status $rc, expected 0"
[ ! -e b.json ] && [ ! -e b.txt ] || fail "rank 1 wrote its --metrics or --log-steps file"
# --memory-cap is per host: --batch-size auto takes the batch that fits every rank, also with
# --sync-bn, whose all-reduces the trial steps (one rank's, without the communicator) no longer
# make: the rank out of memory left the other in one (MPI_ERR_TRUNCATE)
two "$RESNET" "${R[@]}" --sync-bn --batch-size auto --memory-cap 64MiB --max-steps 2 -- \
    "${R[@]}" --sync-bn --batch-size auto --memory-cap 8MiB --max-steps 2
[ "$rc" -eq 0 ] || fail "--sync-bn --batch-size auto, caps of 64 and 8 MiB: exit status $rc, expected 0"
grep -q '^batch-size auto: [0-9]* per rank' "$tmp/out" || fail "--sync-bn --batch-size auto: no batch chosen"
# the cap that bound the batch is the one reported (it was rank 0's 64 MiB and its limit, beside
# peaks and failures of rank 1's 8 MiB)
grep -q '^batch-size auto: [0-9]* per rank (peak [0-9.]* MiB of the 8.00 MiB cap (rank 1.s, the smallest), limit 7.20 MiB with 10% headroom)' \
    "$tmp/out" || fail "--batch-size auto, caps of 64 and 8 MiB: not rank 1's cap and limit reported"
# a rank without a cap fails both ranks as bad usage (the other waited in the first trial's
# all-reduce until the communicator's timeout)
two "$RESNET" "${R[@]}" --batch-size auto --memory-cap 64MiB -- "${R[@]}" --batch-size auto
[ "$rc" -ne 124 ] || fail "--batch-size auto with no cap on rank 1: still running after 60 s"
[ "$rc" -eq 2 ] || fail "--batch-size auto with no cap on rank 1: exit status $rc, expected 2"
grep -q "^fashion_resnet: --batch-size auto: invalid argument: the batch-size search needs a memory cap to fit in: .* (rank 1 has none)$" \
    "$tmp/out" || fail "--batch-size auto with no cap on rank 1: rank 0 does not say rank 1 has none"
# no batch fits rank 1's cap: the search's outcome is agreed, so each rank says why and exits 1 on
# its own (both called MPI_Abort, whose kill could stop rank 1 before it printed the only line
# that says what ran out)
two "$RESNET" "${R[@]}" --batch-size auto --memory-cap 64MiB -- "${R[@]}" --batch-size auto --memory-cap 100KiB
[ "$rc" -ne 124 ] || fail "--batch-size auto, rank 1 too small for a batch of 1: still running after 60 s"
[ "$rc" -eq 1 ] || fail "--batch-size auto, rank 1 too small for a batch of 1: exit status $rc, expected 1"
grep -q "^fashion_resnet: --batch-size auto: out of memory: not even a batch of 1 per rank trains within 90.00 KiB (the cap 100.00 KiB (rank 1's, the smallest: --memory-cap 100KiB) less 10% headroom): .*cannot allocate" \
    "$tmp/out" || fail "--batch-size auto, rank 1 too small: rank 1 does not say what ran out"
grep -q "^fashion_resnet: --batch-size auto: out of memory: .*: it ran out of memory on another rank$" "$tmp/out" ||
    fail "--batch-size auto, rank 1 too small: rank 0 does not say it was another rank"
grep -q "MPI_ABORT was invoked\|aborting the mpi communicator" "$tmp/out" &&
    fail "--batch-size auto, rank 1 too small: a rank aborted the job"
# no whole step in an epoch under --sampler drop-last: the same on every rank, so each says so and
# exits 2 (bad usage) on its own (mpirun may stop one before it prints); both called MPI_Abort
# (exit 1 and Open MPI's abort banner)
D=(--epochs 1 --train-limit 3 --test-limit 10 --sampler drop-last --batch-size 2 --no-progress)
two "$MLP" "${D[@]}" -- "${D[@]}"
[ "$rc" -ne 124 ] || fail "no whole step: still running after 60 s"
[ "$rc" -eq 2 ] || fail "no whole step: exit status $rc, expected 2"
grep -q "^fashion_mlp: --batch-size: invalid argument: no whole step in an epoch: this rank's 1 training samples are fewer than a step's 2" \
    "$tmp/out" || fail "no whole step: not said"
grep -q "MPI_ABORT was invoked\|aborting the mpi communicator" "$tmp/out" && fail "no whole step: a rank aborted the job"
echo "ok: no whole step: exit 2"
# rank 0 cannot write a step's --metrics line (a full disk): every rank saves that step's
# checkpoint and exits 1, said once (rank 0 alone knew it, and aborted the job, which lost the
# training since the last checkpoint)
timeout 60 "$MPIRUN" --oversubscribe --bind-to none -np 2 "$MLP" --train-limit 512 --test-limit 100 --hidden 16 \
    --no-progress --max-steps 3 --checkpoint-dir ck --metrics /dev/full >"$tmp/out" 2>&1
rc=$?
[ "$rc" -eq 1 ] || fail "--metrics /dev/full on 2 ranks: exit status $rc, expected 1"
[ "$(grep -c "stopped after step 1, whose line is not in the file; --resume auto continues from ck/step-00000001" "$tmp/out")" = 1 ] &&
    grep -qF "fashion_mlp: saved checkpoint ck/step-00000001 (step 1)" "$tmp/out" && [ -d ck/step-00000001 ] ||
    fail "--metrics /dev/full on 2 ranks: not saved and stopped, said once"
grep -q "MPI_ABORT was invoked\|aborting the mpi communicator" "$tmp/out" && fail "--metrics /dev/full: a rank aborted the job"
echo "ok: --metrics /dev/full on 2 ranks: saved and stopped, exit 1"
# a resume that fails on every rank alike (rank 0 reads, and shares the outcome): said once by rank
# 0, exit 1 on every rank (each aborted the job: Open MPI's MPI_ABORT banner, and rank 1's copy)
R=(--train-limit 512 --test-limit 100 --hidden 16 --no-progress --max-steps 2)
for which in nowhere ck/step-00000009; do
    timeout 60 "$MPIRUN" --oversubscribe --bind-to none -np 2 "$MLP" "${R[@]}" --checkpoint-dir ck --resume "$which" \
        >"$tmp/out" 2>&1
    rc=$?
    [ "$rc" -eq 1 ] || fail "--resume $which on 2 ranks: exit status $rc, expected 1: $(tail -n 3 "$tmp/out")"
    [ "$(grep -c "^fashion_mlp: --resume: I/O error: '$which'" "$tmp/out")" = 1 ] ||
        fail "--resume $which on 2 ranks: not said once: $(cat "$tmp/out")"
    grep -q "MPI_ABORT was invoked\|aborting the mpi communicator\|(on rank 0)" "$tmp/out" &&
        fail "--resume $which on 2 ranks: a rank aborted the job, or rank 1 said it too: $(cat "$tmp/out")"
done
echo "ok: a failed resume on 2 ranks: said once, exit 1"
echo "PASS"

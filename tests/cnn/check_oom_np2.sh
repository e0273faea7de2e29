#!/usr/bin/env bash
# check_oom_np2.sh MPIEXEC FASHION_RESNET: 2 ranks, rank 1 alone under a memory cap its training step
# does not fit. Rank 1 says once what ran out (what was allocated, how much, the cap and where it
# comes from) and the remedies; rank 0, which had no cap, says nothing of it; the job ends with an
# error, not waiting in a collective (LOCKSTEP_COMM_TIMEOUT is the guard, timeout the hard stop).
set -u
mpiexec=$1 prog=$2
fail() { echo "FAIL: $*"; exit 1; }
args=(--widths 4 --train-limit 256 --test-limit 8 --epochs 1 --batch-size 32 --no-progress)
out=$(LOCKSTEP_COMM_TIMEOUT=20 timeout 40 "$mpiexec" --oversubscribe --bind-to none -np 1 -x LOCKSTEP_COMM_TIMEOUT \
    "$prog" "${args[@]}" : -np 1 -x LOCKSTEP_COMM_TIMEOUT -x LOCKSTEP_MEMORY_LIMIT=2MiB "$prog" "${args[@]}" 2>&1)
rc=$?
printf '%s\n' "$out"
[ $rc -ne 124 ] || fail "still running after 40 s"
[ $rc -ne 0 ] || fail "exit status 0"
n=$(grep -c "out of memory on cpu" <<<"$out")
[ "$n" -eq 1 ] || fail "$n out-of-memory lines, expected 1"
line=$(grep "out of memory on cpu" <<<"$out")
for want in "^fashion_resnet: training step: out of memory: " "cannot allocate [0-9.]* [KM]iB for [a-z]" \
    "the cap is 2.00 MiB (LOCKSTEP_MEMORY_LIMIT=2MiB)" \
    "To fit, try a smaller --batch-size (or --batch-size auto), --precision bf16, or --checkpoint-activations$"; do
    grep -q -- "$want" <<<"$line" || fail "the out-of-memory line lacks '$want'"
done
grep -q "^\[lockstep r1 error\] aborting the mpi communicator (rank 1 of 2)" <<<"$out" || fail "rank 1 did not end the job"
! grep -q "^\[lockstep r0 error\]" <<<"$out" || fail "rank 0 reported an error of its own"
echo PASS

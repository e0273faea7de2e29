#!/bin/bash
# test_rank_fails_slurm.sh LOCKSTEP_RUN RANK_FAILS: test_rank_fails.sh under a real Slurm
# (slurm_cluster.sh), where lockstep-run starts the ranks with srun --mpi=pmix --kill-on-bad-exit=1.
# rank_fails.c: rank 1 prints its error, destroys its communicator and returns 3 while rank 0 waits
# for it in an all-reduce. MPI_Finalize is collective there too (a fence in Slurm's PMIx server):
# a rank that finalized at once would wait in it for rank 0, and srun, whose --kill-on-bad-exit
# acts only once a task has exited, would never end the step. The rank waits 3 s for the others,
# then aborts the job naming itself: srun ends the step and exits with the rank's status, 3, on one
# node and across two (MPI_Abort's code, through PMIx_Abort: srun's own line for the task says
# "Exited with exit code 3" or, where the step's kill came first, "Killed"). Every rank failing
# alike ends with 3 and no abort; a forked child's exit (5) is not the rank's. Each run is bounded
# by `timeout`: a hang fails the test, not ctest's timeout. Only PMIx is checked: Debian's Open MPI
# has no PMI-2 client (with --srun-mpi pmi2 its ranks cannot start).
# Skips (77) unless root with slurm-wlm installed and namespaces available.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/slurm_cluster.sh"
command -v mpirun >/dev/null || { echo "SKIP: Open MPI is not installed" >&2; exit 77; }
LSR=$(realpath "$LSR") PROG=$(realpath "$2")
trap 'slurm_down; rm -rf "$tmp"' EXIT
slurm_up "$tmp/slurm"
rc=$?
[ "$rc" = 77 ] && { echo "SKIP: $slurm_skip" >&2; exit 77; }
[ "$rc" = 0 ] || { echo "FAIL: the Slurm cluster did not start" >&2; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# sallocs NODES MODE: lockstep-run in an allocation of 2 tasks on NODES nodes; sets rc, out, err.
# Past 60 s (LOCKSTEP_COMM_TIMEOUT) rank 0 would give up its all-reduce and abort; at 20 s, well
# before that, the job is taken for hung and killed.
sallocs() {
    on_node0 timeout -k 5 20 salloc -N"$1" -n2 env LOCKSTEP_COMM_TIMEOUT=60 "$LSR" --verbose "$PROG" "$2" \
        >"$tmp/stdout" 2>"$tmp/stderr"
    rc=$?
    out=$(cat "$tmp/stdout")
    err=$(cat "$tmp/stderr")
    [ "$rc" = 124 ] || [ "$rc" = 137 ] && fail "the job did not end within 20 s: $err"
    expect_err "/srun --ntasks=2 --mpi=pmix --kill-on-bad-exit=1 --export=ALL $PROG $2"
}

for n in 1 2; do
    case_ "salloc -N$n -n2: rank 1 fails alone: the job is aborted, naming it, with its status"
    sallocs "$n" alone
    expect_rc 3
    expect_err "rank_fails: rank 1: bad input"
    expect_err "rank 1 of 2 exits with status 3, but the other ranks have not exited within 3 s (one may wait for this rank in a collective): aborting the job (MPI_Abort) rather than waiting for them in MPI_Finalize"
    case $err in *"timed out"* | *"rank_fails: rank 0:"*) fail "rank 0 timed out: $err" ;; esac
done

case_ "salloc -N2 -n2: every rank fails alike: each finalizes and exits 3, no abort"
sallocs 2 all
expect_rc 3
expect_err "rank_fails: rank 0: bad input"
expect_err "rank_fails: rank 1: bad input"
case $err in *"aborting the job"* | *MPI_ABORT*) fail "aborted: $err" ;; esac

case_ "salloc -N2 -n2: a forked child's exit is not the rank's: no barrier, no abort"
sallocs 2 fork
expect_rc 0
for r in 0 1; do
    case $out in *"rank_fails: rank $r: the child exited 5"*) ;; *) fail "rank $r: no child status: $out $err" ;; esac
done
case $err in *"aborting the job"* | *MPI_ABORT*) fail "aborted: $err" ;; esac

[ "$fails" = 0 ] || slurm_logs >&2
finish

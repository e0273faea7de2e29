#!/bin/bash
# test_rank_fails.sh LOCKSTEP_RUN RANK_FAILS: a rank that fails alone after a clean exit from lockstep
# (rank_fails.c: rank 1 prints its error, destroys its communicator and returns 3) while rank 0
# waits for it in an all-reduce. Open MPI's mpirun ends the job as soon as a rank exits non-zero
# (orte_abort_on_non_zero_status), but rank 1 never exited: MPI_Finalize is collective in Open MPI
# (a PMIx fence) and waited for rank 0, which waited in its all-reduce until LOCKSTEP_COMM_TIMEOUT
# (default 30 minutes). Now the rank that exits non-zero waits a few seconds for the others to exit
# too, else aborts the job naming itself: the job ends within seconds with the rank's status. Every
# rank failing alike still finalizes (no abort).
. "$(dirname "$0")/lib.sh"
command -v mpirun >/dev/null || { echo "SKIP: mpirun (Open MPI) is not installed" >&2; exit 77; }
PROG=$2
# (past it, rank 0 gives up and aborts: the job would end anyway, with rank 0's message)
T=60

case_ "rank 1 fails alone: the job is aborted, naming it, with its status"
run LOCKSTEP_COMM_TIMEOUT=$T OMPI_MCA_rmaps_base_oversubscribe=1 timeout -k 5 30 "$LSR" -n 2 "$PROG" alone
expect_rc 3
expect_err "rank_fails: rank 1: bad input"
expect_err "rank 1 of 2 exits with status 3, but the other ranks have not exited within 3 s (one may wait for this rank in a collective): aborting the job (MPI_Abort) rather than waiting for them in MPI_Finalize"
case $err in *"timed out"* | *"rank 0:"*) fail "rank 0 timed out: $err" ;; esac

case_ "every rank fails alike: each finalizes and exits 3, no abort"
run LOCKSTEP_COMM_TIMEOUT=$T OMPI_MCA_rmaps_base_oversubscribe=1 timeout -k 5 30 "$LSR" -n 2 "$PROG" all
expect_rc 3
expect_err "rank_fails: rank 0: bad input"
expect_err "rank_fails: rank 1: bad input"
case $err in *"aborting the job"* | *MPI_ABORT*) fail "aborted: $err" ;; esac

case_ "a forked child's exit is not the rank's: no barrier, no abort"
run LOCKSTEP_COMM_TIMEOUT=$T OMPI_MCA_rmaps_base_oversubscribe=1 timeout -k 5 30 "$LSR" -n 2 "$PROG" fork
expect_rc 0
for r in 0 1; do
    case $out in *"rank_fails: rank $r: the child exited 5"*) ;; *) fail "rank $r: no child status: $out $err" ;; esac
done
case $err in *"aborting the job"* | *MPI_ABORT*) fail "aborted: $err" ;; esac

finish

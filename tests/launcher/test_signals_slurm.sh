#!/bin/bash
# test_signals_slurm.sh LOCKSTEP_RUN: signals to lockstep-run inside a Slurm job (SLURM_JOB_ID
# set, srun as the launcher), with fake srun, scontrol and scancel. SIGUSR1, SIGUSR2, SIGHUP and
# SIGQUIT killed lockstep-run itself there (they were left unblocked), and srun then got SIGTERM
# from PR_SET_PDEATHSIG and killed the ranks without their checkpoint. Now SIGUSR1/SIGUSR2 reach
# the job's steps through scancel and the job goes on; SIGHUP and SIGQUIT are stops, passed on as
# SIGTERM (the signal a lockstep program checkpoints on), as with mpirun.
. "$(dirname "$0")/lib.sh"
fake_slurm
STEP=$tmp/step
fake_scancel "$STEP"

# start: lockstep-run in the background inside "job 123"; waits until srun runs the step
start() {
    rm -f "$STEP" "$STEP.scancel"
    env -i "PATH=$BASEPATH" "HOME=$tmp" SLURM_JOB_ID=123 SLURM_NTASKS=1 FAKE_SRUN_STEP="$STEP" \
        "$LSR" /bin/true >"$tmp/stdout" 2>"$tmp/stderr" &
    pid=$!
    local i
    for ((i = 0; i < 200; i++)); do [ -s "$STEP" ] && return 0; sleep 0.05; done
    fail "srun did not start: $(cat "$tmp/stderr")"
}
# reap: lockstep-run ends within 10 s; sets rc and err
reap() { reap_within 10; }
scancels() { tr '\n' ';' <"$STEP.scancel" 2>/dev/null; }

for s in USR1 USR2; do
    case_ "SIG$s inside a Slurm job: passed to the ranks with scancel, the job goes on"
    start
    kill -$s "$pid"
    sleep 0.5
    kill -0 "$pid" 2>/dev/null || fail "lockstep-run ended on SIG$s"
    [ "$(scancels)" = "--signal=$s 123;" ] || fail "scancel calls: '$(scancels)'"
    kill -TERM "$pid"
    reap
    expect_rc 143
    [ "$(scancels)" = "--signal=$s 123;--signal=TERM 123;" ] || fail "scancel calls: '$(scancels)'"
    expect_err "lockstep-run: SIG$s: passed to the ranks (scancel --signal=$s 123)"
done

for s in HUP QUIT; do
    case_ "SIG$s inside a Slurm job: a stop, passed to the ranks as SIGTERM"
    start
    kill -$s "$pid"
    reap
    expect_rc 143
    [ "$(scancels)" = "--signal=TERM 123;" ] || fail "scancel calls: '$(scancels)'"
    expect_err "lockstep-run: SIG$s: passed to the ranks as SIGTERM (scancel --signal=TERM 123)"
done

case_ "SIGINT inside a Slurm job: passed to the ranks as SIGINT"
start
kill -INT "$pid"
reap
expect_rc 130
[ "$(scancels)" = "--signal=INT 123;" ] || fail "scancel calls: '$(scancels)'"
expect_err "lockstep-run: SIGINT: passed to the ranks (scancel --signal=INT 123)"
finish

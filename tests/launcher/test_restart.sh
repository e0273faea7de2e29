#!/bin/bash
# test_restart.sh LOCKSTEP_RUN [FASHION_MLP DATA_DIR]: --max-restarts. Without a program argument,
# one rank (run directly) of small scripts: a job that keeps failing is run 1 + N times, each run
# seeing LOCKSTEP_RESTART_COUNT, and ends with the last status; one that fails once then succeeds
# ends 0; a rank killed by a signal is restarted; a usage error (2) and a program stopped after its
# checkpoint (130, 143) are not; SIGTERM to lockstep-run, to its process group, or a terminal's
# Ctrl-C reaches the program once and ends the job without a restart, also while waiting to
# restart; SIGUSR1 is passed on; bad option values are usage errors. With
# FASHION_MLP: 2 ranks under mpirun, rank 0 killed (SIGKILL) in its first checkpoint save of the
# first run; the restarted job resumes from that checkpoint and ends with parameters and per-step
# losses equal, bit for bit, to a run that never failed.
. "$(dirname "$0")/lib.sh"
PROG=${2:-}
DATA=${3:-}
LOG=$tmp/attempts.log

# script NAME BODY: an executable bash script in $tmp that first logs its LOCKSTEP_RESTART_COUNT.
script() {
    printf '#!/bin/bash\necho "run ${LOCKSTEP_RESTART_COUNT:-unset}" >>"%s"\n%s\n' "$LOG" "$2" >"$tmp/$1"
    chmod 755 "$tmp/$1"
}
runs() { [ -e "$LOG" ] && tr '\n' ' ' <"$LOG" | sed 's/ $//'; }
expect_runs() { [ "$(runs)" = "$1" ] || fail "runs logged: '$(runs)', expected '$1'"; }
# The counting program: logs every signal it gets; after the first TERM or INT it waits 1 s for
# more (a second one would have stopped a lockstep program at once), then exits 143 or 130.
cat >"$tmp/count.sh" <<EOF
#!/bin/bash
got=0
trap 'echo TERM >>"$LOG"; got=143' TERM
trap 'echo INT >>"$LOG"; got=130' INT
trap 'echo USR1 >>"$LOG"' USR1
echo "run \${LOCKSTEP_RESTART_COUNT:-unset} started, stdin \$([ -t 0 ] && echo tty || echo not-tty)" >>"$LOG"
for i in \$(seq 100); do sleep 0.05; [ \$got != 0 ] && break; [ -e "$tmp/go" ] && exit 0; done
[ \$got = 0 ] && exit 1
for i in \$(seq 20); do sleep 0.05; done
exit \$got
EOF
chmod 755 "$tmp/count.sh"
# bg CMD...: runs CMD in the background in a clean environment, its stderr into $tmp/stderr; $pid
bg() {
    env -i "PATH=$BASEPATH" "$@" 2>"$tmp/stderr" &
    pid=$!
}
# reap: waits (at most 30 s) for $pid; $rc, $err
reap() { reap_within 30; }
trap 'pkill -KILL -f "$tmp/" 2>/dev/null; rm -rf "$tmp"' EXIT
# wait_for PATTERN FILE SECONDS
wait_for() {
    local i
    for ((i = 0; i < $3 * 20; i++)); do
        grep -q -- "$1" "$2" 2>/dev/null && return 0
        sleep 0.05
    done
    return 1
}

if [ -z "$PROG" ]; then
    case_ "a job that keeps failing: 1 + N runs, the last status"
    script fail.sh 'exit 3'
    rm -f "$LOG"
    run "$LSR" -n 1 --max-restarts 2 --restart-delay 0.1 "$tmp/fail.sh"
    expect_rc 3
    expect_runs "run 0 run 1 run 2"
    expect_err "lockstep-run: the job ended with status 3; restart 1 of 2 in 0.1 s (LOCKSTEP_RESTART_COUNT=1)"
    expect_err "lockstep-run: the job ended with status 3; restart 2 of 2 in 0.1 s (LOCKSTEP_RESTART_COUNT=2)"
    expect_err "lockstep-run: the job ended with status 3; no restarts left (--max-restarts 2)"

    case_ "fails once, then succeeds: exit 0"
    script once.sh '[ "$LOCKSTEP_RESTART_COUNT" = 0 ] && exit 1; echo "done on run $LOCKSTEP_RESTART_COUNT"'
    rm -f "$LOG"
    run "$LSR" -n 1 --max-restarts 3 --restart-delay 0 "$tmp/once.sh"
    expect_rc 0
    expect_runs "run 0 run 1"
    expect_out "done on run 1"
    expect_err "the job ended with status 1; restart 1 of 3 in 0 s"

    case_ "killed by SIGKILL on the first run: restarted"
    script killed.sh '[ "$LOCKSTEP_RESTART_COUNT" = 0 ] && kill -KILL $$; exit 0'
    rm -f "$LOG"
    run "$LSR" -n 1 --max-restarts 1 --restart-delay 0 "$tmp/killed.sh"
    expect_rc 0
    expect_runs "run 0 run 1"
    expect_err "the job ended with status 137 (killed by SIGKILL); restart 1 of 1"

    # a status above 128 is a signal only when one killed the process (it read "131 (128 +
    # SIGQUIT)" for a program's own exit 131, and for mpirun's when it cannot start the program)
    case_ "a program that exits 131 itself: its status, restarted"
    script e131.sh 'exit 131'
    rm -f "$LOG"
    run "$LSR" -n 1 --max-restarts 1 --restart-delay 0 "$tmp/e131.sh"
    expect_rc 131
    expect_runs "run 0 run 1"
    expect_err "lockstep-run: the job ended with status 131; restart 1 of 1 in 0 s"

    for c in 131 132; do
        case_ "mpirun exits $c (it could not start the program): not restarted"
        printf '#!/bin/sh\necho mpirun >>"%s"\nexit %s\n' "$LOG" "$c" >"$tmp/mpirun$c"
        chmod 755 "$tmp/mpirun$c"
        rm -f "$LOG"
        run "$LSR" --mpirun "$tmp/mpirun$c" -n 2 --max-restarts 2 --restart-delay 0 /bin/true
        expect_rc "$c"
        expect_runs "mpirun"
        expect_err "lockstep-run: the job ended with status $c (mpirun's when it cannot start the program"
        expect_err "; not restarted (mpirun's status for a program it cannot start)"
    done
    case_ "mpirun exits 139 (a rank killed by SIGSEGV): restarted"
    printf '#!/bin/sh\necho mpirun >>"%s"\nexit 139\n' "$LOG" >"$tmp/mpirun139"
    chmod 755 "$tmp/mpirun139"
    rm -f "$LOG"
    run "$LSR" --mpirun "$tmp/mpirun139" -n 2 --max-restarts 1 --restart-delay 0 /bin/true
    expect_rc 139
    expect_runs "mpirun mpirun"
    expect_err "lockstep-run: the job ended with status 139 (128 + SIGSEGV: a rank killed by it); restart 1 of 1"

    for c in 2 130 143; do
        case_ "exit status $c: not restarted"
        script "stop$c.sh" "exit $c"
        rm -f "$LOG"
        run "$LSR" -n 1 --max-restarts 3 --restart-delay 0 "$tmp/stop$c.sh"
        expect_rc "$c"
        expect_runs "run 0"
        if [ "$c" = 2 ]; then
            expect_err "the job ended with status 2; not restarted (a usage error)"
        else
            expect_err "the job ended with status $c; not restarted (stopped by a signal after its checkpoint)"
        fi
    done

    case_ "without --max-restarts: run once (exec'd), no LOCKSTEP_RESTART_COUNT"
    rm -f "$LOG"
    run "$LSR" -n 1 "$tmp/fail.sh"
    expect_rc 3
    expect_runs "run unset"
    expect_no_err

    case_ "SIGTERM to lockstep-run: passed to the program once, no restart"
    rm -f "$LOG"
    bg "$LSR" -n 1 --max-restarts 3 --restart-delay 0 "$tmp/count.sh"
    wait_for started "$LOG" 20 || fail "the program did not start"
    kill -TERM "$pid"
    reap
    expect_rc 143
    expect_runs "run 0 started, stdin not-tty TERM"
    expect_err "the job ended with status 143 after SIGTERM; not restarted"

    case_ "SIGTERM to lockstep-run's whole process group: the program gets one, no restart"
    rm -f "$LOG"
    bg setsid "$LSR" -n 1 --max-restarts 3 --restart-delay 0 "$tmp/count.sh"
    wait_for started "$LOG" 20 || fail "the program did not start"
    pgid=$(ps -o pgid= -p "$pid" | tr -d ' ')
    [ "$pgid" = "$pid" ] || fail "setsid: lockstep-run's process group is '$pgid', expected $pid"
    kill -TERM -- "-$pgid"
    reap
    expect_rc 143
    expect_runs "run 0 started, stdin not-tty TERM"

    case_ "a terminal's Ctrl-C: the program gets one SIGINT, no restart"
    if command -v script >/dev/null; then
        rm -f "$LOG"
        (
            wait_for started "$LOG" 20
            printf '\003'
            sleep 3
        ) | env -i "PATH=$BASEPATH" timeout 30 script -qfec "$LSR -n 1 --max-restarts 3 --restart-delay 0 $tmp/count.sh" \
            /dev/null >"$tmp/stderr" 2>&1
        rc=$?
        err=$(cat "$tmp/stderr")
        expect_rc 130
        expect_runs "run 0 started, stdin not-tty INT"
        expect_err "the job ended with status 130 after SIGINT; not restarted"
    else
        echo "skipped the Ctrl-C case: no script(1)"
    fi

    case_ "SIGUSR1 to lockstep-run: passed on, the run goes on"
    rm -f "$LOG" "$tmp/go"
    bg "$LSR" -n 1 --max-restarts 1 --restart-delay 0 "$tmp/count.sh"
    wait_for started "$LOG" 20 || fail "the program did not start"
    kill -USR1 "$pid"
    wait_for USR1 "$LOG" 20 || fail "SIGUSR1 did not reach the program"
    touch "$tmp/go"
    reap
    expect_rc 0
    expect_runs "run 0 started, stdin not-tty USR1"
    rm -f "$tmp/go"

    # Ctrl-Z (SIGTSTP to lockstep-run's process group, which the job is not in): it stopped
    # lockstep-run alone and the program ran on; now the program is stopped too, and SIGCONT to
    # lockstep-run (fg, bg) continues both.
    case_ "SIGTSTP: the program is stopped with lockstep-run; SIGCONT continues both"
    rm -f "$LOG" "$tmp/go"
    script tick.sh "echo \$\$ >\"$tmp/tick.pid\"; echo started >>\"$LOG\"
for i in \$(seq 400); do sleep 0.05; [ -e \"$tmp/go\" ] && exit 0; done; exit 1"
    bg "$LSR" -n 1 --max-restarts 1 --restart-delay 0 "$tmp/tick.sh"
    wait_for started "$LOG" 20 || fail "the program did not start"
    kill -TSTP "$pid"
    state() { ps -o stat= -p "$1" | cut -c1; }
    # (each state waited for up to 10 s, read once: a fixed 0.5 s could be early on a loaded machine)
    for ((i = 0; i < 200; i++)); do
        s1=$(state "$pid") s2=$(state "$(cat "$tmp/tick.pid")")
        [ "$s1$s2" = TT ] && break
        sleep 0.05
    done
    [ "$s1" = T ] || fail "lockstep-run not stopped: $s1"
    [ "$s2" = T ] || fail "the program not stopped: $s2"
    kill -CONT "$pid"
    for ((i = 0; i < 200; i++)); do
        s2=$(state "$(cat "$tmp/tick.pid")")
        [ "$s2" != T ] && break
        sleep 0.05
    done
    [ "$s2" != T ] || fail "the program still stopped 10 s after SIGCONT"
    touch "$tmp/go"
    reap
    expect_rc 0
    expect_err "lockstep-run: SIGTSTP: the job is stopped, and lockstep-run; fg, bg or SIGCONT continues both"
    rm -f "$tmp/go"

    case_ "SIGTERM while waiting to restart: no restart"
    rm -f "$LOG"
    start=$(date +%s)
    bg "$LSR" -n 1 --max-restarts 3 --restart-delay 60 "$tmp/fail.sh"
    wait_for "restart 1 of 3 in 60 s" "$tmp/stderr" 20 || fail "no restart message"
    kill -TERM "$pid"
    reap
    expect_rc 143
    expect_runs "run 0"
    expect_err "lockstep-run: SIGTERM while waiting to restart: not restarted"
    [ $(($(date +%s) - start)) -lt 30 ] || fail "lockstep-run waited out the delay"

    case_ "SIGTERM as a failing run ends (delay 0): no restart"
    script gap.sh 'kill -TERM $PPID; exit 1'
    rm -f "$LOG"
    run "$LSR" -n 1 --max-restarts 3 --restart-delay 0 "$tmp/gap.sh"
    [ "$rc" = 1 ] || [ "$rc" = 143 ] || fail "exit status $rc, expected 1 (the run's) or 143 (the run killed by it)"
    expect_runs "run 0"
    expect_err "after SIGTERM; not restarted"

    # A program that is a script around the real one (no exec): the stop reaches both (the
    # program's process group), the script ends at once, and lockstep-run waits for the program
    # it leaves behind (adopted: a child subreaper) to save and exit; before, only the script got
    # the signal and the program ran on after lockstep-run had exited.
    cat >"$tmp/work.sh" <<EOF
#!/bin/bash
trap 'echo "work TERM" >>"$LOG"; sleep 1; echo "work done" >>"$LOG"; exit 143' TERM
echo "work started" >>"$LOG"
for i in \$(seq 400); do sleep 0.05; done
EOF
    printf '#!/bin/sh\n"%s"\n' "$tmp/work.sh" >"$tmp/wrap.sh"
    chmod 755 "$tmp/work.sh" "$tmp/wrap.sh"
    case_ "SIGTERM to a program that is a script around another: both get it, none is left running"
    rm -f "$LOG"
    bg "$LSR" -n 1 --max-restarts 1 --restart-delay 0 "$tmp/wrap.sh"
    wait_for "work started" "$LOG" 20 || fail "the program did not start"
    kill -TERM "$pid"
    reap
    expect_rc 143
    expect_runs "work started work TERM work done"
    expect_err "processes of the job still run after the stop signal: "
    expect_err "(work.sh)"
    left=$(pgrep -f "$tmp/work.sh") && fail "left running: $(ps -o pid,ppid,args -p ${left//$'\n'/,})"

    case_ "a program that leaves a process running: it gets SIGTERM when the program ends"
    script bgexit.sh "sleep 30 >/dev/null 2>&1 & echo \$! >\"$tmp/bg.pid\"; exit 3"
    rm -f "$LOG"
    run "$LSR" -n 1 --max-restarts 1 --restart-delay 0 "$tmp/bgexit.sh"
    expect_rc 3
    expect_err "lockstep-run: $tmp/bgexit.sh has exited, but processes of the job still run: "
    # (named sleep, or bgexit.sh where the background process was listed between fork and exec)
    expect_err "; sending them SIGTERM"
    kill -0 "$(cat "$tmp/bg.pid")" 2>/dev/null && fail "the program's background process is still running"

    case_ "bad values"
    for v in -1 abc 1001; do
        run "$LSR" -n 1 --max-restarts "$v" true
        expect_rc 2
        expect_err "--max-restarts must be an integer from 0 to 1000, got '$v'"
    done
    for v in x -1 1e9 nan ' 1' 0x10 +2 -0 1e2 1.2.3 .; do
        run "$LSR" -n 1 --max-restarts 1 --restart-delay "$v" true
        expect_rc 2
        expect_err "--restart-delay must be a number of seconds from 0 to 3600, got '$v'"
    done
    run "$LSR" -n 1 --max-restarts '' true
    expect_rc 2
    expect_err "--max-restarts must not be empty"
    run "$LSR" -n 1 --max-restarts 1 --restart-delay '' true
    expect_rc 2
    expect_err "--restart-delay must not be empty"
    run "$LSR" -n 1 --max-restarts 1 -x LOCKSTEP_RESTART_COUNT=7 true
    expect_rc 2
    expect_err "-x LOCKSTEP_RESTART_COUNT=7: --max-restarts sets LOCKSTEP_RESTART_COUNT itself"
    run "$LSR" -n 1 --restart-delay 1 true
    expect_rc 0
    expect_err "--restart-delay has no effect without --max-restarts"
    for v in x -1 3601 1e2 ' 1'; do
        run "$LSR" -n 1 --abort-grace "$v" true
        expect_rc 2
        expect_err "--abort-grace must be a number of seconds from 0 to 3600, got '$v'"
    done
    run "$LSR" -n 1 --abort-grace 5 true
    expect_rc 0
    expect_err "--abort-grace has no effect without mpirun (direct starts the ranks)"
    finish
fi

# ---- a real crash under mpirun, resumed from the checkpoint it left ----
command -v mpirun >/dev/null || { echo "skipped: no mpirun"; exit 77; }
[ -e "$DATA/train-images-idx3-ubyte.gz" ] || { echo "skipped: no Fashion-MNIST in '$DATA'"; exit 77; }
cat >"$tmp/crash_first.sh" <<EOF
#!/bin/bash
# the first run's checkpoint saves kill their process (rank 0 writes) after the directory rename
echo "rank \${OMPI_COMM_WORLD_RANK:-?} run \${LOCKSTEP_RESTART_COUNT:-unset}" >>"$LOG"
[ "\${LOCKSTEP_RESTART_COUNT:-}" = 0 ] && export LOCKSTEP_CKPT_CRASH_AT=before-latest
exec "$PROG" "\$@"
EOF
chmod 755 "$tmp/crash_first.sh"
A=(--train-limit 1024 --test-limit 256 --batch-size 16 --epochs 2 --no-progress --data-dir "$DATA")
E=("PATH=$BASEPATH" "HOME=$tmp" OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPENBLAS_NUM_THREADS=1
   OMPI_MCA_rmaps_base_oversubscribe=1)

case_ "2 ranks, a run that never fails"
run "${E[@]}" "$LSR" -n 2 "$PROG" "${A[@]}" --log-steps "$tmp/A.log" --dump-params "$tmp/A.bin"
expect_rc 0
[ "$(wc -l <"$tmp/A.log")" = 64 ] || fail "the straight run logged $(wc -l <"$tmp/A.log") steps, expected 64"

# A rank that aborts the job (a collective past LOCKSTEP_COMM_TIMEOUT) while mpirun's abort does not
# end: mpirun waits for ever on a host that hangs (stopped, still on the network), and so did
# lockstep-run (no restart either). Here rank 1 and mpirun are stopped: rank 0 times out after
# 2 s, tells lockstep-run (LOCKSTEP_RUN_PID, SIGURG) and aborts; the job is killed 1 s later.
case_ "2 ranks, rank 0 aborts while mpirun's abort hangs: the job is killed --abort-grace later"
# emptied first: the case before left its run's "epoch 1" in stdout, which the wait below found
# before the shell had started this job (loaded: mpirun and rank 1 then "not found")
: >"$tmp/stdout"
: >"$tmp/stderr"
env "${E[@]}" LOCKSTEP_COMM_TIMEOUT=2 setsid "$LSR" -n 2 --abort-grace 1 "$PROG" "${A[@]}" --epochs 100000 \
    >"$tmp/stdout" 2>"$tmp/stderr" &
pid=$!
# (up to 2 minutes for the first epoch: a clean machine running two test suites at once took
# more than the 30 s this waited, and the case then stopped mpirun alone)
for ((i = 0; i < 2400; i++)); do grep -q "^epoch 1 " "$tmp/stdout" && break; sleep 0.05; done
mp=$(pgrep -P "$pid")
r1=
for p in $(pgrep -f "^$PROG"); do tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx OMPI_COMM_WORLD_RANK=1 && r1=$p; done
if [ -z "$mp" ] || [ -z "$r1" ] || ! grep -q "^epoch 1 " "$tmp/stdout"; then
    fail "no first epoch in 2 minutes, or mpirun ('$mp') or rank 1 ('$r1') not found: $(cat "$tmp/stderr")"
    kill -KILL "$pid" $mp $r1 $(pgrep -f "^$PROG") 2>/dev/null
    wait "$pid"
else
kill -STOP $r1 $mp
for ((i = 0; i < 300; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
if kill -0 "$pid" 2>/dev/null; then
    fail "lockstep-run still running 15 s after rank 1 and mpirun were stopped"
    kill -KILL "$pid" $mp $r1
fi
wait "$pid"
rc=$?
err=$(cat "$tmp/stderr")
expect_rc 137
expect_err "lockstep-run: the job did not end within 1 s of a rank's abort (MPI_Abort, process "
for ((i = 0; i < 40; i++)); do left=$(pgrep -f "^$PROG") || break; sleep 0.05; done
[ -z "$left" ] || fail "processes left: $(ps -o pid,ppid,stat,args -p ${left//$'\n'/,})"
fi

case_ "2 ranks, rank 0 killed while saving step 24, restarted, resumed"
rm -f "$LOG"
run "${E[@]}" "$LSR" -n 2 --max-restarts 2 --restart-delay 0 "$tmp/crash_first.sh" "${A[@]}" --save-every 24 \
    --resume auto --checkpoint-dir "$tmp/ck" --log-steps "$tmp/B.log" --dump-params "$tmp/B.bin"
expect_rc 0
case $out in
*"fashion_mlp: resumed from $tmp/ck/step-00000024 at step 24, epoch 1 (step 24 of 32 in the epoch)"*) ;;
*) fail "the restarted run did not resume from step 24: $out" ;;
esac
expect_err "LOCKSTEP_CKPT_CRASH_AT=before-latest"
expect_err "(128 + SIGKILL: a rank killed by it); restart 1 of 2 in 0 s (LOCKSTEP_RESTART_COUNT=1)"
[ "$(sort "$LOG" | tr '\n' ' ')" = "rank 0 run 0 rank 0 run 1 rank 1 run 0 rank 1 run 1 " ] ||
    fail "runs logged: $(sort "$LOG" | tr '\n' ' ')"
cmp -s "$tmp/A.bin" "$tmp/B.bin" || fail "parameters after the restarted run differ from the straight run's"
cmp -s "$tmp/A.log" "$tmp/B.log" || fail "per-step losses differ: $(diff "$tmp/A.log" "$tmp/B.log" | head -4)"
finish

#!/bin/bash
# test_restart.sh LOCKSTEP_RUN [FASHION_MLP DATA_DIR]: --max-restarts. Without a program argument,
# one rank (run directly) of small scripts: a job that keeps failing is run 1 + N times, each run
# seeing LOCKSTEP_RESTART_COUNT, and ends with the last status; one that fails once then succeeds
# ends 0; a rank killed by a signal is restarted; a usage error (2) and a program stopped after its
# checkpoint (130, 143) are not; SIGTERM to lockstep-run reaches the program once and ends the job
# without a restart, also while waiting to restart; bad option values are usage errors. With
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
    expect_err "the job ended with status 137 (128 + SIGKILL); restart 1 of 1"

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
            expect_err "the job ended with status $c (128 + SIG$([ $c = 130 ] && echo INT || echo TERM)); not restarted (stopped by a signal after its checkpoint)"
        fi
    done

    case_ "without --max-restarts: run once (exec'd), no LOCKSTEP_RESTART_COUNT"
    rm -f "$LOG"
    run "$LSR" -n 1 "$tmp/fail.sh"
    expect_rc 3
    expect_runs "run unset"
    expect_no_err

    case_ "SIGTERM to lockstep-run: passed to the program once, no restart"
    script term.sh 'trap "echo got TERM >>\"'"$LOG"'\"; exit 143" TERM; echo started >>"'"$LOG"'"; while :; do sleep 0.05; done'
    rm -f "$LOG"
    env -i "PATH=$BASEPATH" "$LSR" -n 1 --max-restarts 3 --restart-delay 0 "$tmp/term.sh" 2>"$tmp/stderr" &
    pid=$!
    wait_for started "$LOG" 20 || fail "the program did not start"
    kill -TERM "$pid"
    wait "$pid"
    rc=$?
    err=$(cat "$tmp/stderr")
    expect_rc 143
    expect_runs "run 0 started got TERM"
    expect_err "the job ended with status 143 (128 + SIGTERM) after SIGTERM; not restarted"

    case_ "SIGTERM while waiting to restart: no restart"
    rm -f "$LOG"
    start=$(date +%s)
    env -i "PATH=$BASEPATH" "$LSR" -n 1 --max-restarts 3 --restart-delay 60 "$tmp/fail.sh" 2>"$tmp/stderr" &
    pid=$!
    wait_for "restart 1 of 3 in 60 s" "$tmp/stderr" 20 || fail "no restart message"
    kill -TERM "$pid"
    wait "$pid"
    rc=$?
    err=$(cat "$tmp/stderr")
    expect_rc 143
    expect_runs "run 0"
    expect_err "lockstep-run: SIGTERM while waiting to restart: not restarted"
    [ $(($(date +%s) - start)) -lt 30 ] || fail "lockstep-run waited out the delay"

    case_ "bad values"
    for v in -1 abc 1001 ''; do
        run "$LSR" -n 1 --max-restarts "$v" true
        expect_rc 2
        expect_err "--max-restarts must be an integer from 0 to 1000, got '$v'"
    done
    for v in x -1 1e9 nan ''; do
        run "$LSR" -n 1 --max-restarts 1 --restart-delay "$v" true
        expect_rc 2
        expect_err "--restart-delay must be a number of seconds from 0 to 3600, got '$v'"
    done
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
expect_err "(128 + SIGKILL); restart 1 of 2 in 0 s (LOCKSTEP_RESTART_COUNT=1)"
[ "$(sort "$LOG" | tr '\n' ' ')" = "rank 0 run 0 rank 0 run 1 rank 1 run 0 rank 1 run 1 " ] ||
    fail "runs logged: $(sort "$LOG" | tr '\n' ' ')"
cmp -s "$tmp/A.bin" "$tmp/B.bin" || fail "parameters after the restarted run differ from the straight run's"
cmp -s "$tmp/A.log" "$tmp/B.log" || fail "per-step losses differ: $(diff "$tmp/A.log" "$tmp/B.log" | head -4)"
finish

#!/bin/bash
# test_signals_mpi.sh LOCKSTEP_RUN: stop signals to `lockstep-run -n 2` under the real mpirun. Open
# MPI's mpirun takes a second SIGTERM as "abort now" and exits without stopping its ranks, which
# then ran on unseen (a training run went on writing checkpoints after its launcher had gone).
# timeout(1) sends its signal twice (to its child, then to its process group), as does a kill of
# both a process and its group. Now lockstep-run runs mpirun as its child, in its own process
# group, and passes one stop signal on: two SIGTERMs back to back, a SIGTERM and a SIGINT a
# second apart, and timeout(1) each leave every rank one SIGTERM, the time to finish ("the
# checkpoint"), and no rank process once lockstep-run has exited.
. "$(dirname "$0")/lib.sh"
command -v mpirun >/dev/null || { echo "SKIP: mpirun (Open MPI) is not installed" >&2; exit 77; }
LOG=$tmp/ranks.log
# The rank: logs its start and every SIGTERM or SIGINT; after the first it takes HOLD seconds (a
# checkpoint's save), logs "done" and exits 143. Without a signal it gives up after 60 s.
cat >"$tmp/rank.sh" <<EOF
#!/bin/bash
r=\$OMPI_COMM_WORLD_RANK got=0
trap 'echo "\$r TERM" >>"$LOG"; got=1' TERM
trap 'echo "\$r INT" >>"$LOG"; got=1' INT
echo "\$r started" >>"$LOG"
for i in \$(seq 1200); do sleep 0.05; [ \$got = 1 ] && break; done
[ \$got = 1 ] || exit 1
sleep "\$HOLD"
echo "\$r done" >>"$LOG"
exit 143
EOF
chmod 755 "$tmp/rank.sh"
trap 'pkill -KILL -f "$tmp/rank.sh" 2>/dev/null; rm -rf "$tmp"' EXIT
# On a SIGTERM mpirun sends its ranks SIGCONT, SIGTERM odls_base_sigkill_timeout later (1 s by
# default), and SIGKILL as long after that: 8 s each here, for a loaded machine (the ranks hold 1 s)
A=(-n 2 --mca odls_base_sigkill_timeout 8 "$tmp/rank.sh")
# start [timeout(1) args]: lockstep-run in the background (its own session), waits for both ranks
start() {
    rm -f "$LOG"
    env -i "PATH=/usr/local/bin:/usr/bin:/bin" HOLD="$HOLD" setsid "$@" "$LSR" "${A[@]}" >"$tmp/stdout" \
        2>"$tmp/stderr" &
    pid=$!
    local i
    for ((i = 0; i < 600; i++)); do [ "$(grep -c started "$LOG" 2>/dev/null)" = 2 ] && return 0; sleep 0.05; done
    fail "the ranks did not start: $(cat "$tmp/stderr")"
}
# reap: lockstep-run ends within 60 s; then no rank process is left, and each rank logged
# one stop signal (the first: TERM, as mpirun passes a SIGINT on as SIGTERM) and done
reap() {
    local i
    for ((i = 0; i < 1200; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
    kill -0 "$pid" 2>/dev/null && { fail "lockstep-run still running after 60 s"; kill -KILL "$pid"; }
    wait "$pid"
    rc=$?
    err=$(cat "$tmp/stderr")
    sleep 0.5
    local left
    left=$(pgrep -f "$tmp/rank.sh")
    [ -z "$left" ] || fail "rank processes outlived lockstep-run: $(ps -o pid,ppid,args -p ${left//$'\n'/,})"
    for r in 0 1; do
        [ "$(grep -c "^$r \(TERM\|INT\)" "$LOG")" = 1 ] || fail "rank $r: stop signals logged: $(grep "^$r " "$LOG" | tr '\n' ' ')"
        grep -q "^$r done" "$LOG" || fail "rank $r did not finish (killed before its 'checkpoint'): $(tr '\n' ' ' <"$LOG")"
    done
}

case_ "two SIGTERMs back to back: the ranks get one, finish, and none outlives lockstep-run"
HOLD=1
start
kill -TERM "$pid"
kill -TERM "$pid"
reap
[ "$rc" != 0 ] || fail "exit status 0 after a SIGTERM"

case_ "SIGTERM, then SIGINT 1.5 s later: not passed to mpirun, said so"
HOLD=1
start
kill -TERM "$pid"
sleep 1.5
kill -INT "$pid"
reap
expect_err "lockstep-run: SIGINT: not passed to mpirun, which is stopping the ranks since the first signal"

case_ "timeout(1) signals lockstep-run and its process group: one SIGTERM reaches the ranks"
HOLD=1
rm -f "$LOG"
env -i "PATH=/usr/local/bin:/usr/bin:/bin" HOLD="$HOLD" timeout 10 "$LSR" "${A[@]}" >"$tmp/stdout" 2>"$tmp/stderr" &
pid=$!
reap
[ "$(grep -c started "$LOG")" = 2 ] || fail "the ranks had not both started within timeout's 10 s: $(tr '\n' ' ' <"$LOG")"
finish

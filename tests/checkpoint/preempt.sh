#!/usr/bin/env bash
# preempt.sh PROG MPIRUN NP SIGNAL WHO [ARGS...]: a long run is sent SIGNAL once its step log shows
# progress: to the process (NP = 1), to every rank (WHO = all, as Slurm does) or to rank 1 only
# (WHO = one: the ranks must still agree to stop after the same step). Expect exit status 128 +
# signal, the message, a checkpoint of the last logged step, and --resume auto continuing from it.
# ARGS go to both runs.
PROG=$1 MPIRUN=$2 NP=$3 SIG=$4 WHO=$5
shift 5
. "$(dirname "$0")/lib.sh"
A=(--train-limit 1000 --test-limit 200 --batch-size 16 --epochs 1000 --no-progress --checkpoint-dir "$tmp/D"
   --save-every 100000 --log-steps L.log "$@")
case $SIG in TERM) code=143 ;; INT) code=130 ;; *) fail "signal $SIG" ;; esac

if [ "$NP" -eq 1 ]; then "$PROG" "${A[@]}" >out 2>&1 &
else "$MPIRUN" --oversubscribe --bind-to none -np "$NP" "$PROG" "${A[@]}" >out 2>&1 & fi
pid=$!
for _ in $(seq 600); do [ -s L.log ] && [ "$(wc -l <L.log)" -ge 5 ] && break; sleep 0.05; done
[ -s L.log ] || { kill -KILL $pid; fail "no progress in the step log"; }
if [ "$NP" -eq 1 ]; then targets=$pid
else
    targets=""
    for p in $(pgrep -P $pid); do
        r=$(tr '\0' '\n' </proc/$p/environ 2>/dev/null | sed -n 's/^OMPI_COMM_WORLD_RANK=//p')
        [ -n "$r" ] || continue
        if [ "$WHO" = all ] || [ "$r" = 1 ]; then targets="$targets $p"; fi
    done
fi
[ -n "$targets" ] || { kill -KILL $pid; fail "no rank processes found"; }
kill -"$SIG" $targets
wait $pid; rc=$?
expect_rc $code
step=$(sed -n "s/^$NAME: received SIG$SIG: finished step \([0-9]*\), saved checkpoint .*; exiting$/\1/p" out)
[ -n "$step" ] || fail "no 'received SIG$SIG: finished step N, saved checkpoint ...; exiting' line"
ck=$(printf '%s/D/step-%08d' "$tmp" "$step")
expect_out "saved checkpoint $ck; exiting"
[ -f "$ck/manifest.json" ] || fail "no checkpoint $ck"
[ "$(cat D/latest)" = "$(basename "$ck")" ] || fail "latest is '$(cat D/latest)', expected $(basename "$ck")"
[ "$(tail -n 1 L.log | cut -d' ' -f1)" = "$step" ] || fail "the last logged step is not $step"
[ "$(grep -c "received SIG" out)" -eq 1 ] || fail "the preemption message should be printed once (rank 0)"

end=$((step + 10))
train "$NP" "${A[@]}" --resume auto --max-steps $end
expect_rc 0
expect_out "$NAME: resumed from $ck at step $step"
expect_out "$NAME: stopped at step $end (--max-steps)"
seq 1 $end | cmp - <(cut -d' ' -f1 L.log) || fail "L.log should list steps 1..$end once each"
echo "PASS: SIG$SIG to $WHO of $NP rank(s): stopped after step $step with status $code, resumed to step $end"

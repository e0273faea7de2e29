#!/bin/bash
# test_dryrun_cpu.sh: exact --dry-run commands for single-host mpirun runs: forwarded variables,
# the per-rank thread rule, --oversubscribe past the core count, the root flag, --mca, --bind,
# -x, choosing mpirun, and shell quoting that a shell turns back into the same argv.
. "$(dirname "$0")/lib.sh"
fake mpirun
M=$tmp/bin/mpirun
oversub() { if [ "$1" -gt "$CORES" ]; then echo " --oversubscribe"; fi; }

case_ "-n 4 on a CPU host, LOCKSTEP_LOG and NCCL_DEBUG set"
T=$(threads 4)
run LOCKSTEP_LOG=debug NCCL_DEBUG=INFO "$LSR" --dry-run -n 4 true --epochs 2
expect_rc 0
expect_out "$M -np 4$ROOTFLAG$(oversub 4) --bind-to none --map-by slot -x LOCKSTEP_LOG -x NCCL_DEBUG -x OMP_NUM_THREADS=$T -x OPENBLAS_NUM_THREADS=$T true --epochs 2"
expect_no_err

case_ "-n 1024: one BLAS thread each, oversubscribed"
run "$LSR" --dry-run --np 1024 true
expect_rc 0
expect_out "$M -np 1024$ROOTFLAG --oversubscribe --bind-to none --map-by slot -x OMP_NUM_THREADS=1 -x OPENBLAS_NUM_THREADS=1 true"

case_ "user's OMP_NUM_THREADS is kept and forwarded, no thread rule"
run OMP_NUM_THREADS=3 "$LSR" --dry-run -n 2 true
expect_out "$M -np 2$ROOTFLAG$(oversub 2) --bind-to none --map-by slot -x OMP_NUM_THREADS true"
run "$LSR" --dry-run -n 2 -x OPENBLAS_NUM_THREADS=5 true
expect_out "$M -np 2$ROOTFLAG$(oversub 2) --bind-to none --map-by slot -x OPENBLAS_NUM_THREADS=5 true"

case_ "forwarded names: LOCKSTEP_* NCCL_* OMP_* OPENBLAS_* MKL_* GOTO_NUM_THREADS CUDA_VISIBLE_DEVICES, sorted"
run ZZ=1 NCCL_IB_DISABLE=1 FOO=bar MKL_NUM_THREADS=2 CUDA_VISIBLE_DEVICES=0,1 LOCKSTEPX=1 \
    SLURM_X=1 OMP_PROC_BIND=close LOCKSTEP_SEED=7 GOTO_NUM_THREADS=1 OPENBLAS_VERBOSE=2 \
    "$LSR" --dry-run -n 2 true
expect_out "$M -np 2$ROOTFLAG$(oversub 2) --bind-to none --map-by slot -x CUDA_VISIBLE_DEVICES -x GOTO_NUM_THREADS -x LOCKSTEP_SEED -x MKL_NUM_THREADS -x NCCL_IB_DISABLE -x OMP_PROC_BIND -x OPENBLAS_VERBOSE true"

case_ "-x, --mca (both forms), --bind, --oversubscribe"
T=$(threads 2)
run LOCKSTEP_LOG=info "$LSR" --dry-run -n 2 -x LOCKSTEP_LOG -x HOME -x LS_TEST_EXTRA=a,b \
    --mca btl self,tcp --mca btl_tcp_if_include=10.0.0.0/24 --bind core --oversubscribe true
expect_out "$M -np 2$ROOTFLAG --oversubscribe --bind-to core:overload-allowed --map-by slot --mca btl self,tcp --mca btl_tcp_if_include 10.0.0.0/24 -x LOCKSTEP_LOG -x HOME -x LS_TEST_EXTRA=a,b -x OMP_NUM_THREADS=$T -x OPENBLAS_NUM_THREADS=$T true"

case_ "--bind core or socket with more ranks than cores: overload allowed (mpirun refused to start)"
run "$LSR" --dry-run -n $((CORES + 1)) -x OMP_NUM_THREADS=1 --bind socket true
expect_out "$M -np $((CORES + 1))$ROOTFLAG --oversubscribe --bind-to socket:overload-allowed --map-by slot -x OMP_NUM_THREADS=1 true"
run "$LSR" --dry-run -n 1 -x OMP_NUM_THREADS=1 --launcher mpirun --bind core true
expect_out "$M -np 1$ROOTFLAG --bind-to core --map-by slot -x OMP_NUM_THREADS=1 true"
run LOCKSTEP_LAUNCHER=bogus "$LSR" --dry-run -n 1 -x OMP_NUM_THREADS=1 --launcher mpirun true
expect_rc 0
expect_out "$M -np 1$ROOTFLAG --bind-to none --map-by slot -x LOCKSTEP_LAUNCHER -x OMP_NUM_THREADS=1 true"

case_ "mpirun from --mpirun NAME, LOCKSTEP_MPIRUN, the flag winning"
fake mpirun2
run "$LSR" --dry-run -n 2 -x OMP_NUM_THREADS=1 --mpirun mpirun2 true
expect_out "$tmp/bin/mpirun2 -np 2$ROOTFLAG$(oversub 2) --bind-to none --map-by slot -x OMP_NUM_THREADS=1 true"
run LOCKSTEP_MPIRUN=$tmp/bin/mpirun2 "$LSR" --dry-run -n 2 -x OMP_NUM_THREADS=1 true
expect_out "$tmp/bin/mpirun2 -np 2$ROOTFLAG$(oversub 2) --bind-to none --map-by slot -x LOCKSTEP_MPIRUN -x OMP_NUM_THREADS=1 true"
run LOCKSTEP_MPIRUN=/nonexistent/mpirun "$LSR" --dry-run -n 2 -x OMP_NUM_THREADS=1 --mpirun "$M" true
expect_rc 0
expect_out "$M -np 2$ROOTFLAG$(oversub 2) --bind-to none --map-by slot -x LOCKSTEP_MPIRUN -x OMP_NUM_THREADS=1 true"

case_ "--launcher mpirun with one rank; -v says what it decided"
run "$LSR" --dry-run -v --launcher mpirun -n 1 true
expect_out "$M -np 1$ROOTFLAG --bind-to none --map-by slot true"
expect_err "launcher mpirun (--launcher), 1 rank"

case_ "stderr a terminal: the ranks get LOCKSTEP_STDERR_TTY=1 (theirs is mpirun's pipe); a value set stays"
if command -v script >/dev/null; then
    # script(1) gives lockstep-run a terminal; the command line comes back through it with CRLF
    run script -qec "'$LSR' --dry-run -n 2 -x OMP_NUM_THREADS=1 true" /dev/null
    out=${out//$'\r'/}
    expect_out "$M -np 2$ROOTFLAG$(oversub 2) --bind-to none --map-by slot -x LOCKSTEP_STDERR_TTY=1 -x OMP_NUM_THREADS=1 true"
    run script -qec "'$LSR' --dry-run -n 1 true" /dev/null
    out=${out//$'\r'/}
    expect_out "LOCKSTEP_STDERR_TTY=1 true"
    run script -qec "LOCKSTEP_STDERR_TTY=0 '$LSR' --launcher direct -n 1 sh -c 'echo tty=\$LOCKSTEP_STDERR_TTY'" /dev/null
    out=${out//$'\r'/}
    expect_out "tty=0"
    run script -qec "'$LSR' --launcher direct -n 1 sh -c 'echo tty=\$LOCKSTEP_STDERR_TTY'" /dev/null
    out=${out//$'\r'/}
    expect_out "tty=1"
fi
run "$LSR" --launcher direct -n 1 sh -c 'echo tty=$LOCKSTEP_STDERR_TTY'
expect_out "tty="

# The variables lockstep-run sets itself are printed with their values: the line, pasted into a
# shell, runs as the real run (it printed "-x LOCKSTEP_RESTART_COUNT", which mpirun run from a
# shell warned about, and nothing for the direct launcher).
case_ "--dry-run --max-restarts: LOCKSTEP_RESTART_COUNT=0 printed with its value"
run "$LSR" --dry-run --max-restarts 2 -n 2 -x OMP_NUM_THREADS=1 true
expect_rc 0
expect_out "$M -np 2$ROOTFLAG$(oversub 2) --bind-to none --map-by slot -x LOCKSTEP_RESTART_COUNT=0 -x OMP_NUM_THREADS=1 true"
run "$LSR" --dry-run --max-restarts 2 -n 1 sh -c 'echo "run $LOCKSTEP_RESTART_COUNT"'
expect_rc 0
expect_out "LOCKSTEP_RESTART_COUNT=0 sh -c 'echo \"run \$LOCKSTEP_RESTART_COUNT\"'"
[ "$(env -i sh -c "$out")" = "run 0" ] || fail "the printed line, run by sh: '$(env -i sh -c "$out")'"

case_ "quoting: a shell turns the printed line back into the same argv"
printf '#!/bin/sh\nprintf "%%s\\0" "$@" >"%s/recorded"\n' "$tmp" >"$tmp/bin/recorder"
chmod 755 "$tmp/bin/recorder"
args=(true 'a b' "it's" '$(touch '"$tmp"'/pwned); rm -rf /nonexistent' '' $'x\ny' '*' '~' '#c' 'a=b' '\' '"q"' '-n' '--' ';' '|' '&')
run "$LSR" --dry-run -n 2 -x OMP_NUM_THREADS=1 --mpirun recorder --mca k 'v w' -x 'E=$(x) y' "${args[@]}"
expect_rc 0
expect_out "$tmp/bin/recorder -np 2$ROOTFLAG$(oversub 2) --bind-to none --map-by slot --mca k 'v w' -x OMP_NUM_THREADS=1 -x 'E=\$(x) y' true 'a b' 'it'\\''s' '\$(touch $tmp/pwned); rm -rf /nonexistent' '' 'x
y' '*' '~' '#c' a=b '\\' '\"q\"' -n -- ';' '|' '&'"
sh -c "$out"
printf '%s\0' -np 2 ${ROOTFLAG:+--allow-run-as-root} $(oversub 2) --bind-to none --map-by slot --mca k 'v w' -x OMP_NUM_THREADS=1 -x 'E=$(x) y' "${args[@]}" >"$tmp/expected"
cmp -s "$tmp/recorded" "$tmp/expected" || fail "the printed command, run by sh, gives different argv"
[ ! -e "$tmp/pwned" ] || fail "an argument was run by a shell"

finish

#!/bin/bash
# test_inject.sh: arguments reach the program byte for byte, however shell-like they look, both
# when the program runs directly (-n 1) and, with "mpi" as the 3rd argument, as 2 ranks through
# the real mpirun, where the forwarded variables and the thread rule must also reach every rank.
# Usage: test_inject.sh LOCKSTEP_RUN PRINTARGS [mpi]
. "$(dirname "$0")/lib.sh"
PRINTARGS=$2
MODE=${3:-direct}
mkdir -p "$tmp/o"
args=('$(touch '"$tmp"'/pwned1); rm -rf /nonexistent' '`touch '"$tmp"'/pwned2`' "a'b\"c" 'x y  z'
      '' $'line1\nline2' '*' '~' '#c' 'a=b' '\n\t\' ';' '&&' '|' '>' "$tmp/pwned3" '-n' '0' '--mca'
      'btl' 'none' '--hostfile' '/nonexistent' '-x' 'PATH' '--' '--dry-run' 'é日本')
printf '%s\0' "${args[@]}" >"$tmp/expected"

check_rank() { # rank
    if ! cmp -s "$tmp/o/rank$1.args" "$tmp/expected"; then
        fail "rank $1 got different arguments:$(od -c "$tmp/o/rank$1.args" 2>&1 | head -20)"
    fi
}
check_env() { # rank VAR=VALUE
    grep -qxF "$2" "$tmp/o/rank$1.env" || fail "rank $1: expected $2 in $(cat "$tmp/o/rank$1.env" 2>&1)"
}

if [ "$MODE" = mpi ]; then
    command -v mpirun >/dev/null || { echo "SKIP: mpirun (Open MPI) is not installed" >&2; exit 77; }
    case_ "2 ranks through mpirun"
    T=$(threads 2)
    run PATH=/usr/local/bin:/usr/bin:/bin LOCKSTEP_TEST_OUT="$tmp/o" LOCKSTEP_LOG=trace NCCL_DEBUG=WARN \
        "$LSR" -n 2 -x 'LS_TEST_EXTRA=$(touch '"$tmp"'/pwned4) x' "$PRINTARGS" "${args[@]}"
    expect_rc 0
    [ "$(printf '%s\n' "$out" | sort)" = "rank 0 argc $((${#args[@]} + 1))
rank 1 argc $((${#args[@]} + 1))" ] || fail "unexpected output: $out"
    for r in 0 1; do
        check_rank $r
        check_env $r LOCKSTEP_LOG=trace
        check_env $r NCCL_DEBUG=WARN
        check_env $r OMP_NUM_THREADS=$T
        check_env $r OPENBLAS_NUM_THREADS=$T
        check_env $r 'LS_TEST_EXTRA=$(touch '"$tmp"'/pwned4) x'
    done
    [ ! -e "$tmp/o/rank2.args" ] || fail "a third rank ran"

    case_ "a failing rank's exit status comes back through mpirun"
    run PATH=/usr/local/bin:/usr/bin:/bin "$LSR" -n 2 sh -c 'exit $((OMPI_COMM_WORLD_RANK + 5))'
    [ "$rc" = 5 ] || [ "$rc" = 6 ] || fail "exit status $rc, expected a rank's (5 or 6)"
else
    case_ "1 rank, run directly"
    run LOCKSTEP_TEST_OUT="$tmp/o" LOCKSTEP_LOG=trace "$LSR" -n 1 -x 'LS_TEST_EXTRA=`x`' "$PRINTARGS" "${args[@]}"
    expect_rc 0
    expect_out "rank 0 argc $((${#args[@]} + 1))"
    check_rank 0
    check_env 0 LOCKSTEP_LOG=trace
    check_env 0 'LS_TEST_EXTRA=`x`'
    check_env 0 'OMP_NUM_THREADS=<unset>'

    case_ "1 rank, the program named by a bare name found in PATH"
    cp "$PRINTARGS" "$tmp/bin/ls-printargs"
    rm -f "$tmp"/o/*
    run LOCKSTEP_TEST_OUT="$tmp/o" CUDA_VISIBLE_DEVICES= "$LSR" ls-printargs "${args[@]}"
    expect_rc 0
    check_rank 0
fi
for f in pwned1 pwned2 pwned3 pwned4; do
    [ ! -e "$tmp/$f" ] || fail "an argument was run by a shell ($f exists)"
done
finish

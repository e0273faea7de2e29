#!/bin/bash
# test_help.sh: --help documents every long option of lockstep_run.c (read from its option
# table), the short options and the environment variables, and exits 0; --version prints one line.
# Usage: test_help.sh LOCKSTEP_RUN LOCKSTEP_RUN_C
. "$(dirname "$0")/lib.sh"
SRC=$2

case_ "--help"
run "$LSR" --help
expect_rc 0
expect_no_err
opts=$(sed -n 's/^ *{"\([a-z-]*\)", *[a-z_]*_argument.*/\1/p' "$SRC")
[ "$(echo "$opts" | grep -c .)" -ge 10 ] || fail "could not read the option table of $SRC"
for o in $opts; do
    grep -q -- "--$o\b" <<<"$out" || fail "--help does not mention --$o"
done
for s in "-n, --np" "-x NAME" "-v, --verbose" "-h, --help" LOCKSTEP_MPIRUN LOCKSTEP_LAUNCHER \
    SLURM_JOB_ID SLURM_NTASKS CUDA_VISIBLE_DEVICES OMP_NUM_THREADS OPENBLAS_NUM_THREADS \
    "LOCKSTEP_\*" "NCCL_\*" --allow-run-as-root "Exit status"; do
    grep -q -- "$s" <<<"$out" || fail "--help does not mention $s"
done
run "$LSR" -h
expect_rc 0

case_ "--version"
run "$LSR" --version
expect_rc 0
[[ $out =~ ^lockstep-run\ [0-9]+\.[0-9]+ ]] || fail "--version printed '$out'"
finish

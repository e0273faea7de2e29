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

# Output that cannot be written (a full disk, a closed stdout) is said, exit 1: --help and
# --version exited 0, --dry-run 1 without a word
if [ -w /dev/full ]; then
    for a in --help --version "--dry-run -n 1 true"; do
        case_ "$a >/dev/full"
        env -i "PATH=$BASEPATH" "$LSR" $a >/dev/full 2>"$tmp/stderr"
        rc=$? err=$(cat "$tmp/stderr")
        expect_rc 1
        [ "$err" = "lockstep-run: cannot write to standard output: No space left on device" ] || fail "stderr: $err"
    done
fi
case_ "--dry-run with stdout closed"
env -i "PATH=$BASEPATH" "$LSR" --dry-run -n 1 true >&- 2>"$tmp/stderr"
rc=$? err=$(cat "$tmp/stderr")
expect_rc 1
[ "$err" = "lockstep-run: cannot write to standard output: Bad file descriptor" ] || fail "stderr: $err"
finish

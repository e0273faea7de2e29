#!/bin/bash
# test_direct.sh: one rank runs the program itself (no mpirun, even when none is installed):
# --dry-run prints just the program, the CPU-host default of one rank says so, -x NAME=VALUE
# reaches the program, and its exit status (or signal) comes back unchanged.
. "$(dirname "$0")/lib.sh"
fake mpirun

case_ "no GPU visible: one rank, run directly, with a hint to pass -n"
run CUDA_VISIBLE_DEVICES= "$LSR" --dry-run true a 'b c'
expect_rc 0
expect_out "true a 'b c'"
expect_err "starting 1 rank on the CPU; pass -n N for more"

case_ "-n 1: directly, quietly"
run "$LSR" --dry-run -n 1 true a
expect_out "true a"
expect_no_err
run "$LSR" --dry-run -n 1 -x FOO=bar -x 'E=x y' -x HOME true
expect_out "FOO=bar E='x y' true"

case_ "--mca with one rank: OMPI_MCA_<name> for the singleton"
run "$LSR" --dry-run -n 1 --mca btl self -x A=1 true
expect_out "A=1 OMPI_MCA_btl=self true"
run "$LSR" -n 1 --mca btl 'self x' sh -c 'printf %s "$OMPI_MCA_btl"'
expect_out "self x"

case_ "-n 1 with no mpirun anywhere in PATH"
run PATH="$tmp/empty" "$LSR" -n 1 /bin/sh -c 'echo "hi $FOO"' -x FOO=no
expect_rc 0
expect_out "hi "
run PATH="$tmp/empty" "$LSR" -n 1 -x FOO=yes /bin/sh -c 'echo "hi $FOO"'
expect_out "hi yes"

case_ "--launcher direct / LOCKSTEP_LAUNCHER=direct"
run LOCKSTEP_LAUNCHER=direct "$LSR" --dry-run true
expect_out "true"
run "$LSR" --dry-run --launcher direct -n 1 true
expect_out "true"

case_ "exit status and signals propagate"
run "$LSR" -n 1 sh -c 'exit 7'
expect_rc 7
exec 3>&2 2>/dev/null # bash's own "Terminated" report
run "$LSR" -n 1 sh -c 'kill -TERM $$'
exec 2>&3 3>&-
expect_rc 143
run "$LSR" -n 1 false
expect_rc 1

case_ "the program's own options are not the launcher's"
run "$LSR" -n 1 sh -c 'printf "[%s]" "$@"' sh -n 5 --dry-run -v --help
expect_rc 0
expect_out "[-n][5][--dry-run][-v][--help]"
run "$LSR" -n 1 -- sh -c 'printf "[%s]" "$@"' sh --
expect_out "[--]"

finish

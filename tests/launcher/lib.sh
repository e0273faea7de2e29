# lib.sh: helpers sourced by the launcher's test scripts (bash). A test script is called as
# `test_x.sh LOCKSTEP_RUN [HELPER...]`, runs lockstep-run in a clean environment (env -i) with a
# temporary bin/ of fake mpirun/srun first in PATH, and checks stdout, stderr and the exit status.
set -u

LSR=$1
[ -x "$LSR" ] || { echo "lib.sh: lockstep-run '$LSR' is not executable" >&2; exit 1; }
fails=0
label=
tmp=$(mktemp -d "${TMPDIR:-/tmp}/ls_launcher.XXXXXX") || exit 1
chmod 755 "$tmp"
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/bin" "$tmp/empty"
BASEPATH=$tmp/bin:/usr/local/bin:/usr/bin:/bin

# fake NAME [exit-status]: a stand-in for mpirun/srun that must never actually run in dry-run tests.
fake() {
    printf '#!/bin/sh\necho "fake %s ran" >&2\nexit %s\n' "$1" "${2:-99}" >"$tmp/bin/$1"
    chmod 755 "$tmp/bin/$1"
}

case_() { label=$*; }
fail() {
    echo "FAIL [$label]: $*" >&2
    fails=$((fails + 1))
}

# run [NAME=VALUE...] command args...: runs in a clean environment; sets $out, $err, $rc.
run() {
    env -i "PATH=$BASEPATH" "HOME=$tmp" "$@" >"$tmp/stdout" 2>"$tmp/stderr"
    rc=$?
    out=$(cat "$tmp/stdout")
    err=$(cat "$tmp/stderr")
}

expect_rc() {
    [ "$rc" = "$1" ] || fail "exit status $rc, expected $1 (stderr: $err)"
}
expect_out() {
    [ "$out" = "$1" ] || fail "stdout differs:
  got:      $out
  expected: $1
  stderr:   $err"
}
expect_err() { # substring
    case $err in
    *"$1"*) ;;
    *) fail "stderr lacks '$1': $err" ;;
    esac
}
expect_no_err() {
    [ -z "$err" ] || fail "unexpected stderr: $err"
}

finish() {
    if [ "$fails" -ne 0 ]; then
        echo "$fails check(s) failed" >&2
        exit 1
    fi
    echo ok
    exit 0
}

# What lockstep-run sees on this host: logical CPUs it may use, and their physical cores.
CPUS=$(nproc)
host_cores() {
    local list cpu a b pairs=
    list=$(awk '/^Cpus_allowed_list/ {print $2}' /proc/self/status)
    for r in ${list//,/ }; do
        a=${r%-*} b=${r#*-}
        for ((cpu = a; cpu <= b; cpu++)); do
            local t=/sys/devices/system/cpu/cpu$cpu/topology
            [ -r "$t/core_id" ] || { echo "$CPUS"; return; }
            pairs+="$(cat "$t/physical_package_id"):$(cat "$t/core_id")"$'\n'
        done
    done
    printf '%s' "$pairs" | sort -u | grep -c .
}
CORES=$(host_cores)
# threads RANKS_PER_HOST: the per-rank thread count lockstep-run picks.
threads() {
    local t=$((CPUS / $1))
    [ "$t" -ge 1 ] || t=1
    echo "$t"
}
if [ "$(id -u)" = 0 ]; then ROOTFLAG=" --allow-run-as-root"; else ROOTFLAG=; fi

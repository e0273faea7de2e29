# lib.sh: helpers sourced by the launcher's test scripts (bash). A test script is called as
# `test_x.sh LOCKSTEP_RUN [HELPER...]`, runs lockstep-run in a clean environment (env -i) with a
# temporary bin/ of fake mpirun/srun first in PATH, and checks stdout, stderr and the exit status.
set -u

LSR=$1
[ -x "$LSR" ] || { echo "lib.sh: lockstep-run '$LSR' is not executable" >&2; exit 1; }
fails=0
label=
# What the last run (or a test's own command) gave; set before any expect_*.
out= err= rc=0
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

# fake_slurm: srun and scontrol stand-ins that answer Slurm's queries and fail if anything else
# runs (but FAKE_SRUN_STEP: srun runs a step, see fake_scancel). srun --mpi=list lists
# $FAKE_SRUN_MPI (default "none pmi2 pmix"; FAKE_SRUN_OLD=1: in the "srun: NAME" format of older
# Slurm; FAKE_SRUN_LIST_FAIL=1: fails); scontrol show config says MpiDefault = $FAKE_MPI_DEFAULT
# (default none; FAKE_SCONTROL_FAIL=1: cannot reach the controller).
fake_slurm() {
    cat >"$tmp/bin/srun" <<'EOF'
#!/bin/sh
if [ "$*" = --mpi=list ]; then
    [ -n "${FAKE_SRUN_LIST_FAIL:-}" ] && { echo "srun: error: fake failure" >&2; exit 1; }
    if [ -n "${FAKE_SRUN_OLD:-}" ]; then
        echo "srun: MPI types are..."
        for t in ${FAKE_SRUN_MPI-none pmi2 pmix}; do echo "srun: $t"; done
    else
        echo "MPI plugin types are..."
        for t in ${FAKE_SRUN_MPI-none pmi2 pmix}; do printf '\t%s\n' "$t"; done
    fi
    exit 0
fi
if [ -n "${FAKE_SRUN_STEP:-}" ]; then
    # a job step that runs until scancel (fake_scancel) passes it a stop: 143 (TERM) or 130 (INT)
    echo started >"$FAKE_SRUN_STEP"
    for i in $(seq 600); do
        grep -q -- '--signal=TERM' "$FAKE_SRUN_STEP.scancel" 2>/dev/null && exit 143
        grep -q -- '--signal=INT' "$FAKE_SRUN_STEP.scancel" 2>/dev/null && exit 130
        sleep 0.05
    done
    exit 0
fi
echo "fake srun ran" >&2
exit 99
EOF
    cat >"$tmp/bin/scontrol" <<'EOF'
#!/bin/sh
[ "$*" = "show config" ] || { echo "fake scontrol ran: $*" >&2; exit 99; }
if [ -n "${FAKE_SCONTROL_FAIL:-}" ]; then
    echo "slurm_load_ctl_conf error: Unable to contact slurm controller (connect failure)" >&2
    exit 1
fi
echo "Configuration data as of 2026-12-03T09:00:00"
echo "MinJobAge               = 300 sec"
echo "MpiDefault              = ${FAKE_MPI_DEFAULT:-none}"
echo "MpiParams               = (null)"
EOF
    chmod 755 "$tmp/bin/srun" "$tmp/bin/scontrol"
}

# fake_scancel STEP: a scancel that appends its arguments to STEP.scancel, where the srun of
# fake_slurm with FAKE_SRUN_STEP=STEP reads them (it writes "started" to STEP once it runs).
fake_scancel() {
    printf '#!/bin/sh\necho "$*" >>"%s.scancel"\n' "$1" >"$tmp/bin/scancel"
    chmod 755 "$tmp/bin/scancel"
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

# reap_within S: $pid (lockstep-run started in the background, stderr into $tmp/stderr) ends
# within S seconds (else a failure, and it is killed); sets rc and err
reap_within() {
    local i
    for ((i = 0; i < $1 * 20; i++)); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
    kill -0 "$pid" 2>/dev/null && { fail "lockstep-run still running after $1 s"; kill -KILL "$pid"; }
    wait "$pid"
    rc=$?
    err=$(cat "$tmp/stderr")
}

# lib.sh: shared by the checkpoint shell tests. Sourced with PROG (a training example:
# fashion_mlp, fashion_resnet) and MPIRUN set by the caller; gives NAME (the program's name, which
# starts its messages), a scratch directory $tmp (the working directory, removed on exit), fail,
# expect_out, expect_rc, train NP ARGS... which runs PROG directly (NP = 1) or under mpirun
# (NP > 1), its output into $tmp/out and its exit status into $rc, and reldiff/within to compare
# two --dump-params files.
set -u
NAME=$(basename "$PROG")
tmp=$(mktemp -d /tmp/ls_ckpt_e2e.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
cd "$tmp" || exit 1
export OPENBLAS_NUM_THREADS=1 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fail() { echo "FAIL: $*"; echo "--- last output:"; tail -n 30 "$tmp/out" 2>/dev/null; exit 1; }
train() { # NP ARGS...
    local np=$1; shift
    if [ "$np" -eq 1 ]; then "$PROG" "$@" >"$tmp/out" 2>&1; rc=$?
    else "$MPIRUN" --oversubscribe --bind-to none -np "$np" "$PROG" "$@" >"$tmp/out" 2>&1; rc=$?; fi
}
expect_out() { grep -qF -- "$1" "$tmp/out" || fail "output lacks '$1'"; }
expect_rc() { [ "$rc" -eq "$1" ] || fail "exit status $rc, expected $1"; }
# the largest |a - b| over the largest |a| of two --dump-params files (f32)
reldiff() {
    paste <(od -An -v -f -w4 "$1") <(od -An -v -f -w4 "$2") |
        awk '{ d = $1 - $2; if (d < 0) d = -d; a = $1 < 0 ? -$1 : $1; if (d > m) m = d; if (a > x) x = a; n++ }
             END { if (n == 0 || x == 0) print "inf"; else printf "%.3g\n", m / x }'
}
within() { awk -v d="$1" -v t="$2" 'BEGIN { exit !(d != "inf" && d + 0 <= t + 0) }'; }
